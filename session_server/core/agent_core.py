"""``AgentCore``: one agent's in-memory state and every decision about it (pure).

The core is a state machine in the style of h11: it does no I/O and knows no event
loop. It owns the agent's caches (the recent events and session state per session, the
agent's strategy, which sessions were built since activation, which are compacting) and
answers each request with either a value or what it needs first:

- a ``Need`` (``NeedState``, ``NeedAgentStrategy``, ``NeedWindow``, ``NeedSnapshot``): the
  read to run before asking again. The actor runs it, hands the answer to ``learn`` (into
  the request's ``Known``) and asks again;
- a plan: an ``AppendPlan`` (the ``AppendBatch`` for one store transaction and the
  snapshot to write after it), a ``CompactionDue`` (a compaction to run), or the answer.

After a commit the actor calls ``committed(plan, outcome)``: the core updates its caches
and returns the ``Effects`` to run (mirror lines, subscriber notifications, snapshot).

Ordering is the actor's job: it calls the write-side methods (``committed``, the
``*_deleted`` and ``strategy_written`` notices) under its write lock, in commit order.
Reads that raced with a commit are recognised by the cache's per-session versions.

This module holds the turn path (``prepare_turn``, ``plan_turn``, ``committed``) and the
write-side notices; ``AgentCore`` inherits the caches, reads and strategies
(``core_state``), the context builds (``context_builds``) and the compaction decisions
(``compaction_decisions``). The needs are in ``needs``, the decision values in
``decisions``; every name once defined here is still importable from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..compaction.config import validate_strategy
from ..compaction.triggers import token_pressure, usage_prompt_tokens
from ..values.blocks import without_blocks
from ..values.codec import message_to_event, new_event_ids, now_ms
from ..values.context import WorkingContext
from ..values.errors import InvalidParamsError
from ..values.plans import AppendBatch, AppendOutcome, AppendResult, Effects, SnapshotDue
from ..values.tokens import count_events
from ..values.usage import normalise_usage
from .compaction_decisions import CompactionDecisions
from .context_builds import ContextBuilds
from .decisions import (
    AppendPlan,
    PreparedTurn,
)
from .message_values import check_messages
from .needs import (
    Known,
    Need,
    NeedState,
    existing_state,
    known_state,
)
from .turn_pressure import context_tokens, highest_turn, summarizable

__all__ = [
    "AgentCore",
]


class AgentCore(ContextBuilds, CompactionDecisions):
    """The state and decisions of one agent. No I/O: see the module docstring."""

    # -- appends ----------------------------------------------------------------------------

    def unwritten(self, plan: AppendPlan, known: Known) -> AppendResult | NeedState:
        """The answer to a batch that writes nothing: the session's last seq (0 when the
        session does not exist: an empty append is a no-op, even for an unknown id)."""
        state = known_state(known, plan.batch.session_id)
        if isinstance(state, NeedState):
            return state
        return AppendResult(seqs=[], last_seq=0 if state is None else state.last_seq)

    def prepare_turn(
        self,
        session_id: str,
        ctx: WorkingContext,
        *,
        usage: Mapping[str, Any] | None,
        on_conflict: str,
        idempotency_key: str | None,
        validated: bool = False,
        strategy: Mapping[str, Any] | None = None,
        count: bool = False,
        model: str | None = None,
    ) -> PreparedTurn:
        """Check a persist request and turn ``ctx.get_new_messages()`` into events.

        ``validated``: the new messages come straight from ``parse_messages`` (the RPC
        boundary decoded and checked them): they are not checked a second time.
        ``strategy`` is the request level of the strategy precedence for the pressure
        check (as for a build). ``count``: take the events' token counts now (the caller
        runs this off the event loop for a large turn: a pressure check would otherwise
        count it on the loop, and the commit uses the same counts). ``usage`` (with the
        optional ``model``) is normalised here (``values.usage.normalise_usage``) and
        stored with the turn.
        """
        if on_conflict not in ("append", "reject"):
            raise InvalidParamsError("on_conflict: must be 'append' or 'reject'")
        if usage is not None and not isinstance(usage, Mapping):
            raise InvalidParamsError("usage: must be an object", data={"field": "usage"})
        recorded = normalise_usage(usage, model)
        new = ctx.get_new_messages()
        checked = new if validated else check_messages(new)
        now = now_ms()  # one time for the turn's events
        events = [
            message_to_event(session_id, m, event_id, timestamp=now)
            for m, event_id in zip(checked, new_event_ids(len(checked)), strict=True)
        ]
        return PreparedTurn(
            session_id=session_id,
            events=events,
            tokens=count_events(events) if count else None,
            instructions=list(ctx.system_instructions),
            base_seq=ctx.base_seq,
            usage=usage,
            on_conflict="reject" if on_conflict == "reject" else "append",
            idempotency_key=idempotency_key,
            strategy=None
            if strategy is None
            else validate_strategy(strategy, source="request strategy"),
            recorded=recorded,
        )

    def plan_turn(self, turn: PreparedTurn, known: Known) -> AppendPlan | AppendResult | Need:
        """Plan a persist: its events, the pressure flag the turn calls for (``None``
        leaves the flag), the conflict check, and the end-of-turn snapshot."""
        sid = turn.session_id
        flag = self._pressure_flag(turn, known)
        if isinstance(flag, Need):
            return flag
        expected = turn.base_seq if turn.on_conflict == "reject" else None
        if not turn.events and expected is None and not flag:
            state = existing_state(known, sid)
            if isinstance(state, Need):
                return state
            return AppendResult(
                seqs=[], last_seq=state.last_seq, compaction_required=state.compaction_required
            )
        batch = AppendBatch(
            sid,
            turn.events,
            turn.tokens if turn.tokens is not None else known.tokens,
            expected_last_seq=expected,
            idempotency_key=turn.idempotency_key,
            compaction_required=flag,
            usage=turn.recorded,
        )
        # The end of a turn: the snapshot is the default context as SQLite stands when the
        # mirror batch is written, not the caller's ctx (which may hold only this turn).
        # Rendered memory blocks stay out of it: a block's delete erases them from SQLite
        # and the mirror, and a snapshot file must not keep them.
        return AppendPlan(batch, SnapshotDue(sid, without_blocks(turn.instructions)))

    def _pressure_flag(self, turn: PreparedTurn, known: Known) -> bool | Need | None:
        """``True`` when the turn puts the session under token pressure, under the
        effective strategy (request > session > agent > server); ``None`` leaves the flag.

        The prompt size is the provider's usage in any shape, or else (under a compacting
        strategy) the server's own count of the context as it will stand after the turn.
        After a compaction that gained nothing, the flag is not raised again until a new
        user turn gives it something to gain (the reason was reported once).
        """
        sid = turn.session_id
        if not turn.events and turn.usage is None:
            return None  # nothing new to measure
        # The strategy alone decides whether the window is needed: computing one of
        # ``context_limit`` events for every persist cost more than the rest of the check.
        stored_strategy = self.stored_strategy(sid, known)
        if isinstance(stored_strategy, Need):
            return stored_strategy
        config = self.resolve(stored_strategy, turn.strategy)
        if isinstance(config, Need):
            return config
        if turn.usage is None and config.mode == "none":
            return None  # no size to measure: neither a reported one nor the server's count
        reported = None if turn.usage is None else usage_prompt_tokens(turn.usage)
        own: int | None = None
        if reported is None and config.mode != "none":
            view = self.view(sid, self.context_limit, known)
            if isinstance(view, Need):
                return view
            own = context_tokens(view, turn, config, known)
        pressure = token_pressure(turn.usage, config, context_tokens=own)
        if not pressure.required:
            return None
        if config.mode == "summarize":
            view = self.view(sid, self.context_limit, known)
            if isinstance(view, Need):
                return view
            new_turns = sum(1 for e in turn.events if e.action == "user_message")
            if not summarizable(view, config, new_turns):
                self._futile[sid] = (
                    "nothing to summarise: every turn not yet summarised is within "
                    f"raw_tail_turns={config.raw_tail_turns}"
                )
                return None
            # After a summary that gained nothing: not again before a new user turn.
            gate = self._futile_turn.get(sid)
            if gate is not None and highest_turn(view.events) + new_turns <= gate:
                return None
        self._futile.pop(sid, None)
        self._futile_turn.pop(sid, None)
        return True

    def futile_note(self, session_id: str) -> str | None:
        """Why an automatic compaction of ``session_id`` would gain nothing, the first
        time that reason is asked for (each reason is reported once per session)."""
        reason = self._futile.get(session_id)
        if reason is None or (session_id, reason) in self._futile_noted:
            return None
        self._futile_noted.add((session_id, reason))
        return reason

    def committed(self, plan: AppendPlan, outcome: AppendOutcome) -> Effects | None:
        """A batch committed (called under the write lock, in commit order): update the
        caches and return what follows (``None`` for a replay: nothing happened)."""
        if outcome.replay:
            return None
        batch, result = plan.batch, outcome.result
        sid = batch.session_id
        if outcome.stored:
            self._recent.appended(sid, outcome.stored, result.last_seq, result.compaction_required)
            return Effects(sid, outcome.stored, outcome.stored, plan.snapshot)
        if batch.compaction_required is not None:
            self._recent.flag_changed(sid, result.compaction_required)
        return Effects(sid, snapshot=plan.snapshot)

    def session_deleted(self, session_id: str) -> None:
        self._built.discard(session_id)
        self._recent.forget(session_id)
        self.forget_strategy(session_id)
        self._omitted.pop(session_id, None)
        self._removals[session_id] = self._removals.get(session_id, 0) + 1
        self._futile.pop(session_id, None)
        self._futile_turn.pop(session_id, None)
        self.blocks.forget(session_id)

    def events_deleted(self, session_id: str) -> None:
        """Events of the session were removed (committed; the write lock is held)."""
        self._recent.forget(session_id)
        self._omitted.pop(session_id, None)
        self._removals[session_id] = self._removals.get(session_id, 0) + 1

    def hibernated(self) -> None:
        """The store closed: what the core knows may be stale when it opens again."""
        self._built.clear()
        self._recent.clear()
        self.forget_strategy()
        self._omitted.clear()
        self._removals.clear()  # nothing planned is in flight: the actor was idle
        self._agent_loaded = False
        self._agent_generation = 0
        self.blocks.clear()
