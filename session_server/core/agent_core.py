"""``AgentCore``: one agent's in-memory state and every decision about it (pure).

The core is a state machine in the style of h11: it does no I/O and knows no event
loop. It owns the agent's caches (the recent events and session state per session, the
strategies it knows, which sessions were built since activation, which are compacting)
and answers each request with either a value or what it needs first:

- a ``Need`` (``NeedState``, ``NeedAgentStrategy``, ``NeedWindow``, ``NeedSnapshot``,
  ``NeedCount``): the read to run before asking again. The actor runs it, hands the
  answer to ``learn`` (into the request's ``Known``) and asks again;
- a plan: an ``AppendPlan`` (the ``AppendBatch`` for one store transaction and the
  snapshot to write after it), a ``CompactionDue`` (a compaction to run), or the answer.

After a commit the actor calls ``committed(plan, outcome)``: the core updates its caches
and returns the ``Effects`` to run (mirror lines, subscriber notifications, snapshot).

Ordering is the actor's job: it calls the write-side methods (``committed``, the
``*_deleted`` and ``strategy_written`` notices) under its write lock, in commit order.
Reads that raced with a commit are recognised by the cache's per-session versions.

The decisions are the core's methods: the reads' answers and windows, the strategy
levels and their precedence, the appends and the turn path (``prepare_turn``,
``plan_turn``, ``committed``), the context builds (from the window, or from the snapshot
file on the first build of an activation: only one SQLite vouches for,
``trusted_snapshot_digest``), and the compaction decisions. State with a seam of its own
is held by collaborators: the recent events (``values.recent.RecentCache``), the stored
strategies it knows (``strategies.KnownStrategies``) and the compaction bookkeeping
(``compaction_ledger.CompactionLedger``). The needs are in ``needs``, the decision
values in ``decisions``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from ..compaction.builder import BuiltContext, build_compacted_context
from ..compaction.config import StrategyConfig, resolve_strategy, validate_strategy
from ..compaction.fallback import FallbackCause, plan_placeholder_fallback
from ..compaction.records import CompactionPlan, make_compaction_event
from ..compaction.triggers import token_pressure, usage_prompt_tokens
from ..values.blocks import without_blocks
from ..values.cache_budget import CacheBudget
from ..values.codec import encode_json, message_to_event, new_event_id, new_event_ids, now_ms
from ..values.context import WorkingContext
from ..values.errors import ConflictError, InvalidParamsError
from ..values.events import SessionEvent
from ..values.plans import (
    AppendBatch,
    AppendOutcome,
    AppendResult,
    Effects,
    NewSession,
    SessionState,
    SnapshotDue,
)
from ..values.recent import RecentCache, SessionView
from ..values.tokens import count_events
from ..values.usage import normalise_usage
from ..values.validation import parse_event
from .block_cache import BlockCache
from .compaction_ledger import CompactionLedger
from .decisions import (
    LARGE_WINDOW_EVENTS,
    AppendPlan,
    CompactionDue,
    CompactionInput,
    ContextDraft,
    PlaceholderFallback,
    PreparedTurn,
    SnapshotParts,
    StrategyWrite,
)
from .message_values import check_messages
from .needs import (
    Known,
    Need,
    NeedAgentStrategy,
    NeedBlocks,
    NeedCount,
    NeedSnapshot,
    NeedState,
    NeedWindow,
    existing_state,
    known_state,
)
from .strategies import KnownStrategies
from .turn_pressure import context_tokens, highest_turn, summarizable

__all__ = ["AgentCore", "compaction_report", "render_snapshot", "trusted_snapshot_digest"]


def render_snapshot(view: SessionView, instructions: list[str]) -> SnapshotParts:
    """Messages, instructions and last seq of the default context of ``view`` (the window
    of ``context_limit`` events): what ``working_context_snapshot.json`` holds. One
    function for a view from the cache and one read from the file."""
    built = build_compacted_context(
        view.events,
        record=None if view.record is None else view.record.data,
        messages=view.messages,
        system_instructions=instructions,
    )
    return built.messages, built.system_instructions, view.last_seq


def trusted_snapshot_digest(state: SessionState) -> str | None:
    """The digest a snapshot file must have to stand for the session's context, or
    ``None`` when SQLite vouches for none at the session's last seq.

    SQLite binds a snapshot (seq + SHA-256 of its bytes) only after the file was written
    and only at a clean close; a delete clears the binding in its own transaction. So a
    file left by a crash, a snapshot older than a delete, or a hand-edited file (whatever
    its ``last_seq`` says) is never served.
    """
    if state.snapshot_digest is None or state.snapshot_seq != state.last_seq:
        return None
    return state.snapshot_digest


class AgentCore:
    """The state and decisions of one agent. No I/O: see the module docstring."""

    def __init__(
        self,
        agent_id: str,
        *,
        context_limit: int,
        server_strategy: dict[str, Any] | None,
        snapshots: bool,
        cache_budget: CacheBudget | None = None,
    ) -> None:
        if not isinstance(context_limit, int) or context_limit < 1:
            raise ValueError("context_limit: must be a positive int")
        self.agent_id = agent_id
        self.context_limit = context_limit
        self.snapshots = snapshots
        # Recently written events per session, so building a context reads no row it has
        # already decoded (see ``recent``), within the bytes of ``cache_budget`` (shared
        # by the agents of a registry).
        self._recent = RecentCache(max(4 * context_limit, 256), budget=cache_budget)
        # Sessions whose context was built since activation (the snapshot file is
        # consulted only for the first build of an activation).
        self._built: set[str] = set()
        # Compactions running, summaries that would gain nothing.
        self.compactions = CompactionLedger()
        # Per session: (from_seq, before_seq, count) of the last omitted-events count, so
        # a window that moved forward adds what the cache holds instead of reading again.
        self._omitted: dict[str, tuple[int, int, int]] = {}
        # Per session: how many removals of events (delete, pop, clear) committed since
        # the store opened; a plan derived from events read before one is refused.
        self._removals: dict[str, int] = {}
        # The stored strategy levels known: the agent's, and those of sessions the recent
        # cache does not hold.
        self.strategies = KnownStrategies(server_strategy)
        # The memory blocks builds render (read once, dropped by a block write).
        self.blocks = BlockCache()

    @property
    def server_strategy(self) -> dict[str, Any] | None:
        """The server's default strategy (the lowest level of the precedence)."""
        return self.strategies.server

    # -- reads the actor ran ------------------------------------------------------------

    def learn(self, need: Need, answer: Any, known: Known) -> None:
        """Record the answer to ``need`` (what the store or the snapshot file returned)."""
        if isinstance(need, NeedState):
            known.states[need.session_id] = answer
        elif isinstance(need, NeedAgentStrategy):
            self.strategies.agent_read(need, answer)
        elif isinstance(need, NeedWindow):
            if need.limit is None:
                known.full[need.session_id] = answer
            else:
                view = self._recent.seed(need.session_id, answer, need.version)
                known.views[(need.session_id, need.limit)] = view
        elif isinstance(need, NeedSnapshot):
            known.snapshots[need.session_id] = answer
        elif isinstance(need, NeedCount):
            known.counts[(need.session_id, need.from_seq, need.before_seq)] = int(answer)
        elif isinstance(need, NeedBlocks):
            # A ``BlockSet``, or ``(BlockSet, its text under no pin)``.
            if isinstance(answer, tuple):
                self.blocks.learn(need, answer[0], answer[1])
            else:
                self.blocks.learn(need, answer)
        else:  # pragma: no cover - every Need is handled above
            raise TypeError(f"unknown need {need!r}")

    def removals(self, session_id: str) -> int:
        """How many removals of the session's events (delete, pop, clear) committed
        since the store opened: read it before reading events that a plan derives
        something from, and give it to the plan (``AppendPlan.removals``)."""
        return self._removals.get(session_id, 0)

    def removal_conflict(self, plan: AppendPlan) -> ConflictError | None:
        """The refusal of ``plan`` when events of its session were removed since the
        reads it was derived from (``AppendPlan.removals``); ``None``: it may commit."""
        sid = plan.batch.session_id
        if plan.removals is None or plan.removals == self.removals(sid):
            return None
        return ConflictError(
            f"session_id: events of session {sid!r} were removed while this write was"
            " planned from them; nothing written",
            data={"field": "session_id", "reason": "events_removed"},
        )

    def cached_view(self, session_id: str, limit: int) -> SessionView | None:
        """The window from the cache alone (``None``: the cache cannot say)."""
        return self._recent.window(session_id, limit)

    def view(self, session_id: str, limit: int, known: Known) -> SessionView | NeedWindow:
        """The context window and session state, from the cache when it can answer."""
        view = self._recent.window(session_id, limit)
        if view is not None:
            return view
        read = known.views.get((session_id, limit))
        if read is not None:
            return read
        return NeedWindow(session_id, limit, self._recent.version(session_id))

    # -- strategies -----------------------------------------------------------------------

    def agent_strategy(self) -> dict[str, Any] | NeedAgentStrategy | None:
        return self.strategies.agent()

    def resolve(
        self, session: Mapping[str, Any] | None, request: Mapping[str, Any] | None
    ) -> StrategyConfig | NeedAgentStrategy:
        """Precedence: request > session (persisted) > agent default > server default."""
        return self.strategies.resolve(session, request)

    def _session_config(
        self, session_id: str, request: Mapping[str, Any] | None, known: Known
    ) -> StrategyConfig | Need:
        """The effective strategy of an existing session (``NotFoundError`` otherwise)."""
        state = existing_state(known, session_id)
        if isinstance(state, Need):
            return state
        return self.resolve(state.strategy, request)

    def strategy_levels(self, session_id: str | None, known: Known) -> dict[str, Any] | Need:
        """``{server, agent, session, effective}`` (session None: the agent's)."""
        session: dict[str, Any] | None = None
        if session_id is not None:
            state = existing_state(known, session_id)
            if isinstance(state, Need):
                return state
            session = state.strategy
        effective = self.resolve(session, None)
        if isinstance(effective, Need):
            return effective
        return {
            "server": self.server_strategy,
            "agent": self.strategies.agent_known,
            "session": session,
            "effective": effective.to_dict(),
        }

    def plan_strategy(
        self, strategy: Mapping[str, Any] | None, session_id: str | None
    ) -> StrategyWrite | Need:
        """Validate a strategy level to store; only the keys given are stored (``None``
        or ``{}`` clears it) and the merged result must still be valid."""
        level = "agent" if session_id is None else "session"
        values = validate_strategy(strategy, source=f"{level} strategy") if strategy else {}
        if session_id is None:
            resolve_strategy(self.server_strategy, values or None)  # merge must be valid
        else:
            merged = self.resolve(values or None, None)  # the merge must be valid
            if isinstance(merged, Need):
                return merged
        stored = encode_json(values) if values else None
        return StrategyWrite(session_id, values or None, stored)

    def strategy_written(self, write: StrategyWrite) -> None:
        """A ``StrategyWrite`` committed (called under the write lock)."""
        if write.session_id is not None:
            self._recent.strategy_changed(write.session_id, write.values)
        self.strategies.written(write)

    def stored_strategy(self, session_id: str, known: Known) -> dict[str, Any] | Need | None:
        """The persisted strategy of an existing session (``NotFoundError`` when there is
        none): from the recent cache, the strategies remembered, or a read of its row."""
        hit, strategy = self._recent.cached_strategy(session_id)
        if hit:
            return strategy
        hit, strategy = self.strategies.session(session_id)
        if hit:
            return strategy
        if session_id not in known.states:
            known.strategy_epoch = self.strategies.epoch
        state = existing_state(known, session_id)
        if isinstance(state, Need):
            return state
        self.strategies.remember(session_id, state.strategy, known.strategy_epoch)
        return state.strategy

    def forget_strategy(self, session_id: str | None = None) -> None:
        """Drop what is remembered of ``session_id``'s strategy (``None``: of every
        session): it was deleted, or the store closed."""
        self.strategies.forget(session_id)

    # -- appends ----------------------------------------------------------------------------

    def plan_events(
        self,
        session_id: str,
        events: Sequence[SessionEvent],
        *,
        expected_last_seq: int | None = None,
        idempotency_key: str | None = None,
        create: NewSession | None = None,
        usage: Mapping[str, Any] | None = None,
        model: str | None = None,
    ) -> AppendPlan:
        """Validate ``events`` (Structs are not validated on construction) and plan their
        append; ids are kept when given, assigned otherwise. ``usage`` (any provider shape,
        ``values.usage.normalise_usage``, with the optional ``model``) is stored with the
        last event, as a persisted turn's is."""
        if usage is not None and not isinstance(usage, Mapping):
            raise InvalidParamsError("usage: must be an object", data={"field": "usage"})
        recorded = normalise_usage(usage, model)
        checked = [
            parse_event(msgspec.to_builtins(e), f"events[{i}]") for i, e in enumerate(events)
        ]
        prepared = [e if e.id else msgspec.structs.replace(e, id=new_event_id()) for e in checked]
        return AppendPlan(
            AppendBatch(
                session_id,
                prepared,
                None,  # counted on the commit's worker thread
                expected_last_seq=expected_last_seq,
                idempotency_key=idempotency_key,
                create=create,
                usage=recorded,
            )
        )

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
                self.compactions.futile(
                    sid,
                    "nothing to summarise: every turn not yet summarised is within "
                    f"raw_tail_turns={config.raw_tail_turns}",
                )
                return None
            # After a summary that gained nothing: not again before a new user turn.
            gate = self.compactions.futile_turn(sid)
            if gate is not None and highest_turn(view.events) + new_turns <= gate:
                return None
        self.compactions.clear_futile(sid)
        return True

    def futile_note(self, session_id: str) -> str | None:
        """Why an automatic compaction of ``session_id`` would gain nothing, the first
        time that reason is asked for (each reason is reported once per session)."""
        return self.compactions.note(session_id)

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
        self.compactions.clear_futile(session_id)
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
        self.strategies.hibernated()
        self._omitted.clear()
        self._removals.clear()  # nothing planned is in flight: the actor was idle
        self.blocks.clear()

    # -- context builds ---------------------------------------------------------------------

    def build(
        self,
        session_id: str,
        known: Known,
        *,
        instructions: list[str],
        limit: int | None,
        strategy: Mapping[str, Any] | None,
        may_compact: bool = True,
    ) -> WorkingContext | ContextDraft | CompactionDue | Need:
        """The working context under the session's strategy, or the compaction to run
        first (never with ``may_compact=False``: a read-only build, e.g. for an export).
        A window of ``LARGE_WINDOW_EVENTS`` or more gives a ``ContextDraft`` instead of
        the context: the caller builds it (``draft.build()``) where it chooses.

        The first build of an activation, with the defaults, may come from the snapshot
        file when it is current (its ``last_seq`` is the session's) and no compaction can
        be due.
        """
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise InvalidParamsError("limit: must be a positive integer")
        blocks = self.blocks.lookup(session_id)
        if isinstance(blocks, Need):
            return blocks
        if (
            may_compact
            and limit is None
            and strategy is None
            and blocks.empty  # a snapshot holds no blocks: rendered below
            and session_id not in self._built
        ):
            restored = self._restore(session_id, instructions, known)
            if restored is not None:
                return restored
        window = limit or self.context_limit
        view = self.view(session_id, window, known)
        if isinstance(view, Need):
            return view
        config = self.resolve(view.strategy, strategy)
        if isinstance(config, Need):
            return config
        rendered = self.blocks.rendered(session_id, config.blocks)
        if isinstance(rendered, Need):
            return rendered
        if rendered:  # after the caller's instructions, before the summary memory
            instructions = [*instructions, rendered]
        due = (
            may_compact
            and not known.compacted
            and (
                config.mode == "compact"
                or (config.mode == "summarize" and view.compaction_required)
            )
        )
        if due:
            return CompactionDue(session_id, config, instructions, window, force=False)
        omitted = self._omitted_events(session_id, view, known)
        if isinstance(omitted, Need):
            return omitted
        if may_compact:
            self._built.add(session_id)
        draft = ContextDraft(
            view.events,
            None if view.record is None else view.record.data,
            view.messages,
            instructions,
            view.last_seq,
            config,
            omitted,
            # Read from the store for this build (not the cache's memoised window): the
            # draft may free its events once built.
            owned=known.views.get((session_id, window)) is view,
        )
        # A large window is built by the shell, off the event loop.
        return draft if len(view.events) >= LARGE_WINDOW_EVENTS else draft.build()

    def _omitted_events(self, session_id: str, view: SessionView, known: Known) -> int | Need:
        """Events a context of ``view`` neither shows nor summarises: those before its
        window, after what the record's summary covers (from the session's start without
        one). Counted once by the store, then kept up to date from the cache."""
        from_seq = (None if view.record is None else view.record.from_seq) or 1
        first = next((e.seq for e in view.events if e.action != "compaction"), None)
        if first is None or first <= from_seq:
            return 0
        count = known.counts.get((session_id, from_seq, first))
        memo = self._omitted.get(session_id)
        if count is None and memo is not None and memo[0] == from_seq and memo[1] <= first:
            # The window moved forward: add the few events it left behind (cheaper than
            # counting the whole range again on every build).
            more = self._recent.count_between(session_id, memo[1], first)
            count = None if more is None else memo[2] + more
        if count is None:
            count = self._recent.count_between(session_id, from_seq, first)
        if count is None:
            return NeedCount(session_id, from_seq, first)
        self._omitted[session_id] = (from_seq, first, count)
        return count

    def _restore(
        self, session_id: str, instructions: list[str], known: Known
    ) -> WorkingContext | Need | None:
        if not self.snapshots:
            return None
        state = known_state(known, session_id)
        if isinstance(state, Need):
            return state
        if state is None or state.compaction_required or not state.last_seq:
            return None
        if state.last_seq > self.context_limit:
            return None  # the window may leave events out: a build says how many
        # Under a compaction strategy the build may have to compact first: no shortcut.
        config = self.resolve(state.strategy, None)
        if isinstance(config, Need):
            return config
        if config.mode != "none":
            return None
        digest = trusted_snapshot_digest(state)
        if digest is None:
            return None  # no snapshot bound to this content (a delete, a crash, never)
        if session_id not in known.snapshots:
            return NeedSnapshot(session_id, state.last_seq, digest)
        restored = known.snapshots[session_id]
        # The snapshot holds the instructions of the turn that wrote it, followed by the
        # memory block of the latest summary, if any. Only a snapshot taken with exactly
        # this request's instructions can stand for a build: otherwise its memory block
        # would be lost (or a stale instruction served), so rebuild from SQLite.
        if restored is None or restored.system_instructions != instructions:
            return None
        self._built.add(session_id)
        # The one token rule (the builder's), here without stored per-event counts.
        parts = BuiltContext([], restored.messages, 0, None)
        return WorkingContext(
            instructions,
            restored.messages,
            {"restored_from": "working_context_snapshot.json"},
            base_seq=state.last_seq,
            token_count=parts.token_count(instructions),
        )

    def snapshot_parts(self, due: SnapshotDue) -> SnapshotParts | None:
        """Messages, instructions and last seq of the session's default context, from the
        cache as of the latest commit (``None`` when the cache cannot say: no snapshot)."""
        view = self._recent.window(due.session_id, self.context_limit)
        return None if view is None else render_snapshot(view, due.instructions)

    # -- compactions ------------------------------------------------------------------------

    def plan_compact(
        self,
        session_id: str,
        known: Known,
        *,
        strategy: Mapping[str, Any] | None,
        instructions: Iterable[str],
    ) -> CompactionDue | Need:
        """An explicit compaction (``memory.compact``) with the effective strategy."""
        config = self._session_config(session_id, strategy, known)
        if isinstance(config, Need):
            return config
        return CompactionDue(session_id, config, list(instructions), self.context_limit, force=True)

    def begin_compaction(self, session_id: str) -> bool:
        """Mark a compaction of ``session_id`` as running; ``False`` when one already is
        (one at a time per session: a pressure flag is acted on exactly once)."""
        return self.compactions.begin(session_id)

    def end_compaction(self, session_id: str) -> None:
        self.compactions.end(session_id)

    def compaction_input(self, due: CompactionDue, known: Known) -> CompactionInput | Need:
        """What to plan from, read under the session's compaction turn."""
        view = self.view(due.session_id, due.limit, known)
        if isinstance(view, Need):
            return view
        if due.config.mode == "summarize":
            # Summaries cover every turn not yet summarised, not only the current window.
            full = known.full.get(due.session_id)
            if full is None:
                return NeedWindow(due.session_id, None, self._recent.version(due.session_id))
            # The whole session, read for this compaction alone (never cached).
            return CompactionInput(full.events, view.record, view.compaction_required, True)
        return CompactionInput(view.events, view.record, view.compaction_required)

    def placeholder_fallback(
        self, due: CompactionDue, cause: FallbackCause, known: Known
    ) -> PlaceholderFallback | Need | None:
        """The summary ``due`` is ``cause`` (``slow``: still running after the wait;
        ``failed``: failed, timed out or backing off): the placeholder record to write
        first, when the strategy sets placeholder parameters and they would replace more
        than the latest record does (see ``compaction.fallback``); else ``None``.

        Planned from the window as it stands, without the session's compaction turn (a
        slow summary holds it): the append expects the session's last seq, so a summary
        or turn committed meanwhile refuses it instead of being overwritten. The pressure
        flag is left set: the summary is still due, and supersedes the fallback."""
        view = self.view(due.session_id, due.limit, known)
        if isinstance(view, Need):
            return view
        plan = plan_placeholder_fallback(
            view.events,
            due.config,
            cause=cause,
            previous_record=None if view.record is None else view.record.data,
            system_instructions=due.instructions,
        )
        if plan.record is None:
            return None
        event = make_compaction_event(due.session_id, plan.record, plan.event_count)
        append = self.plan_events(due.session_id, [event], expected_last_seq=view.last_seq)
        return PlaceholderFallback(append, plan)

    def after_compaction(
        self,
        due: CompactionDue,
        given: CompactionInput,
        plan: CompactionPlan,
        *,
        removals: int | None = None,
    ) -> AppendPlan | None:
        """The append a planned compaction calls for: its event (clearing the flag it
        acted on), the flag alone when there was nothing to do, or nothing.

        ``removals``: the session's removal count read before ``given`` was: the
        append is refused when events were removed since (a summary of deleted text is
        never written after the delete answered; the flag stays for the next build).

        An automatic summary that would gain nothing (no record, or a context no smaller
        than before) is not written; its reason is kept (``futile_note``) and the flag is
        not raised again before a new user turn."""
        before, after = plan.tokens_before, plan.tokens_after
        no_gain = before is not None and after is not None and after >= before
        if due.config.mode == "summarize" and not due.force and (plan.record is None or no_gain):
            reason = (
                plan.reason
                if plan.record is None
                else (f"a summary would not shrink the context ({before} -> {after} tokens)")
            )
            self.compactions.futile(due.session_id, reason, highest_turn(given.events))
            plan = CompactionPlan(plan.strategy, None, reason)
        if plan.record is None:
            if given.pressure and due.config.mode != "compact":
                # Acted on (nothing to summarise): the flag must not fire on every build.
                return AppendPlan(AppendBatch(due.session_id, compaction_required=False))
            return None
        event = make_compaction_event(due.session_id, plan.record, plan.event_count)
        batch = self.plan_events(due.session_id, [event]).batch
        flag = False if given.pressure else None
        return AppendPlan(
            msgspec.structs.replace(batch, compaction_required=flag), removals=removals
        )


def compaction_report(plan: CompactionPlan) -> dict[str, Any]:
    """The answer of an explicit compaction (``compacted: false`` says why not)."""
    record = plan.record or {}
    return {
        "compacted": plan.record is not None,
        "strategy": plan.strategy,
        "reason": plan.reason,
        "event_count": plan.event_count,
        "items_removed": plan.items_removed,
        "tokens_before": plan.tokens_before,
        "tokens_after": plan.tokens_after,
        "boundary_seq": record.get("boundary_seq"),
    }
