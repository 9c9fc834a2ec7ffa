"""``CoreState``: one agent's caches in ``AgentCore``, and the decisions that only read
them (pure): what the reads returned (``learn``), the context window (``view``), the
strategy levels and their precedence, the plan of an append of given events.

``AgentCore`` is this with the turn path (``agent_core``), the context builds
(``context_builds``) and the compaction decisions (``compaction_decisions``) on top.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Final

import msgspec

from ..compaction.config import StrategyConfig, resolve_strategy, validate_strategy
from ..values.cache_budget import CacheBudget
from ..values.codec import encode_json, new_event_id
from ..values.errors import ConflictError
from ..values.events import SessionEvent
from ..values.plans import AppendBatch, NewSession
from ..values.recent import RecentCache, SessionView
from ..values.validation import parse_event
from .block_cache import BlockCache
from .decisions import AppendPlan, StrategyWrite
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
)

__all__ = ["AGENT_STRATEGY_KEY", "CoreState"]

AGENT_STRATEGY_KEY: Final = "strategy"
_DEFAULT_CONFIG: Final = StrategyConfig()


# Sessions whose strategy an agent's core remembers beside its recent cache (see
# ``CoreState.stored_strategy``).
MAX_KNOWN_STRATEGIES: Final = 256


class CoreState:
    """The caches of one agent and the decisions over them alone (see the module
    docstring). No I/O."""

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
        self.server_strategy = server_strategy
        self.snapshots = snapshots
        # Recently written events per session, so building a context reads no row it has
        # already decoded (see ``recent``), within the bytes of ``cache_budget`` (shared
        # by the agents of a registry).
        self._recent = RecentCache(max(4 * context_limit, 256), budget=cache_budget)
        # Sessions whose context was built since activation (the snapshot file is
        # consulted only for the first build of an activation).
        self._built: set[str] = set()
        # Sessions whose last automatic summary gained nothing (the reason), and those
        # whose reason was reported.
        self._futile: dict[str, str] = {}
        self._futile_noted: set[tuple[str, str]] = set()
        self._futile_turn: dict[str, int] = {}  # the last turn when a summary gained nothing
        # Per session: (from_seq, before_seq, count) of the last omitted-events count, so
        # a window that moved forward adds what the cache holds instead of reading again.
        self._omitted: dict[str, tuple[int, int, int]] = {}
        self._compacting: set[str] = set()
        # Per session: how many removals of events (delete, pop, clear) committed since
        # the store opened; a plan derived from events read before one is refused.
        self._removals: dict[str, int] = {}
        self._agent_strategy: dict[str, Any] | None = None
        self._agent_loaded = False
        self._agent_generation = 0
        # The persisted strategy of sessions known to exist that the recent cache does not
        # hold (a client that persists without building through the server): a persist
        # then reads no session row to find it. Least recently used first, at most
        # ``MAX_KNOWN_STRATEGIES``; dropped with the session, on hibernation, and kept
        # current by ``strategy_written``. ``_strategy_epoch`` counts the changes, so a
        # read issued before one is not remembered.
        self._strategies: OrderedDict[str, dict[str, Any] | None] = OrderedDict()
        self._strategy_epoch = 0
        # The memory blocks builds render (read once, dropped by a block write).
        self.blocks = BlockCache()

    # -- reads the actor ran ------------------------------------------------------------

    def learn(self, need: Need, answer: Any, known: Known) -> None:
        """Record the answer to ``need`` (what the store or the snapshot file returned)."""
        if isinstance(need, NeedState):
            known.states[need.session_id] = answer
        elif isinstance(need, NeedAgentStrategy):
            # A strategy set meanwhile (a newer generation) wins over this older read.
            if need.generation == self._agent_generation:
                self._agent_strategy = None if answer is None else msgspec.json.decode(answer)
                self._agent_loaded = True
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
        if not self._agent_loaded:
            return NeedAgentStrategy(self._agent_generation)
        return self._agent_strategy

    def resolve(
        self, session: Mapping[str, Any] | None, request: Mapping[str, Any] | None
    ) -> StrategyConfig | NeedAgentStrategy:
        """Precedence: request > session (persisted) > agent default > server default."""
        agent = self.agent_strategy()
        if isinstance(agent, NeedAgentStrategy):
            return agent
        server = self.server_strategy
        if server is None and agent is None and not session and not request:
            return _DEFAULT_CONFIG  # the common case: no validation to redo on every build
        return resolve_strategy(server, agent, session, request)

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
            "agent": self._agent_strategy,
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
        if write.session_id is None:
            self._agent_strategy, self._agent_loaded = write.values, True
            self._agent_generation += 1
        else:
            self._recent.strategy_changed(write.session_id, write.values)
            self._strategy_epoch += 1
            if write.session_id in self._strategies:
                self._strategies[write.session_id] = write.values

    def stored_strategy(self, session_id: str, known: Known) -> dict[str, Any] | Need | None:
        """The persisted strategy of an existing session (``NotFoundError`` when there is
        none): from the recent cache, the strategies remembered, or a read of its row."""
        hit, strategy = self._recent.cached_strategy(session_id)
        if hit:
            return strategy
        if session_id in self._strategies:
            self._strategies.move_to_end(session_id)
            return self._strategies[session_id]
        if session_id not in known.states:
            known.strategy_epoch = self._strategy_epoch
        state = existing_state(known, session_id)
        if isinstance(state, Need):
            return state
        if known.strategy_epoch == self._strategy_epoch:  # no change since the read
            self._strategies[session_id] = state.strategy
            if len(self._strategies) > MAX_KNOWN_STRATEGIES:
                self._strategies.popitem(last=False)
        return state.strategy

    def forget_strategy(self, session_id: str | None = None) -> None:
        """Drop what is remembered of ``session_id``'s strategy (``None``: of every
        session): it was deleted, or the store closed."""
        self._strategy_epoch += 1
        if session_id is None:
            self._strategies.clear()
        else:
            self._strategies.pop(session_id, None)

    # -- appends ----------------------------------------------------------------------------

    def plan_events(
        self,
        session_id: str,
        events: Sequence[SessionEvent],
        *,
        expected_last_seq: int | None = None,
        idempotency_key: str | None = None,
        create: NewSession | None = None,
    ) -> AppendPlan:
        """Validate ``events`` (Structs are not validated on construction) and plan their
        append; ids are kept when given, assigned otherwise."""
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
            )
        )
