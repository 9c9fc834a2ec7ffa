"""What ``AgentCore`` decides: the values its answers carry to the actor (pure).

``AppendPlan`` (one store transaction and the snapshot after it), ``CompactionDue`` and
``CompactionInput`` (a compaction to run and what it plans from), ``ContextDraft`` (a
large context to build where the shell chooses), ``PlaceholderFallback``,
``StrategyWrite``, ``PreparedTurn`` (a validated persist request) and ``SnapshotParts``.
The values the store also sees are in ``values.plans``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal

import msgspec

from ..compaction.builder import build_compacted_context
from ..compaction.config import StrategyConfig
from ..compaction.records import CompactionPlan
from ..values.context import WorkingContext
from ..values.events import ContextMessage, SessionEvent
from ..values.plans import AppendBatch, SnapshotDue
from ..values.recent import ViewMessages
from ..values.records import CompactionRecord
from ..values.usage import UsageTotals

__all__ = [
    "LARGE_WINDOW_EVENTS",
    "AppendPlan",
    "CompactionDue",
    "CompactionInput",
    "ContextDraft",
    "PlaceholderFallback",
    "PreparedTurn",
    "SnapshotParts",
    "StrategyWrite",
    "free_in_steps",
]

SnapshotParts = tuple[list[ContextMessage], list[str], int]

LARGE_WINDOW_EVENTS: Final = 1000
"""A build whose window holds at least this many events answers with a ``ContextDraft``
(the shell builds it off the event loop: that work is linear in the events); smaller
windows are built at once."""


class AppendPlan(msgspec.Struct, frozen=True):
    """One store transaction, and the snapshot to write once it committed.

    ``removals``: the session's removal count (``AgentCore.removals``) the plan was made
    against, or ``None``. When set, the plan is refused (``ConflictError``, reason
    ``events_removed``) if events of the session were removed since: what it would write
    was derived from them (a summary planned before a delete)."""

    batch: AppendBatch
    snapshot: SnapshotDue | None = None
    removals: int | None = None


class CompactionDue(msgspec.Struct, frozen=True):
    """Run a compaction of one session (one at a time per session)."""

    session_id: str
    config: StrategyConfig
    instructions: list[str]
    limit: int
    force: bool


class CompactionInput(msgspec.Struct, frozen=True):
    """What a compaction plans from: the events, the latest record, the pressure flag."""

    events: list[SessionEvent]
    record: CompactionRecord | None
    pressure: bool
    owned: bool = False
    """``events`` is a store read for this compaction that nothing else keeps (the
    caller may empty it when done: ``free_in_steps``)."""

    @property
    def record_data(self) -> dict[str, Any] | None:
        return None if self.record is None else self.record.data


class ContextDraft(msgspec.Struct, frozen=True):
    """A working context decided but not built yet: ``build()`` makes it (pure, linear in
    ``events``; nothing here is shared with the core's state that the core changes, so
    it may run on any thread)."""

    events: list[SessionEvent]
    record: dict[str, Any] | None
    messages: ViewMessages | None
    instructions: list[str]
    base_seq: int
    config: StrategyConfig
    omitted: int
    owned: bool = False
    """``events`` is a store read's list that nothing else keeps (not a cached window)."""

    def build(self) -> WorkingContext:
        """The context; an ``owned`` list of events is emptied afterwards, a slice at a
        time (``free_in_steps``), so that its events are freed where this runs: dropped
        at once by the caller, 100k events are one long deallocation holding the GIL."""
        ctx = build_compacted_context(
            self.events,
            record=self.record,
            messages=self.messages,
            system_instructions=self.instructions,
            base_seq=self.base_seq,
            config=self.config,
            count_tokens=True,
        )
        ctx.omitted_events = self.omitted
        if self.owned:
            free_in_steps(self.events)
        return ctx


FREE_STEP: Final = 4096
"""Items of a large list freed at once by ``free_in_steps``."""


def free_in_steps(items: list[Any]) -> None:
    """Empty ``items`` from the end, ``FREE_STEP`` at a time: each slice's objects are
    freed in one C call that holds the GIL; between two, other threads may run."""
    while items:
        del items[-FREE_STEP:]


class PlaceholderFallback(msgspec.Struct, frozen=True):
    """The compact record a build applies while its summary cannot be had: the append
    (refused if the session moved since it was planned) and the plan it came from."""

    append: AppendPlan
    plan: CompactionPlan


class StrategyWrite(msgspec.Struct, frozen=True):
    """Store a strategy level (``session_id`` None: the agent's); ``stored`` is its JSON
    (``None`` clears the level)."""

    session_id: str | None
    values: dict[str, Any] | None
    stored: str | None


class PreparedTurn(msgspec.Struct, frozen=True):
    """A persist request with its new messages validated and turned into events.

    ``tokens`` is ``None``: the events are counted where it costs least, on the commit's
    worker thread (``sqlite_ops.append``), or on the loop by a pressure check that needs
    the count first (``Known.tokens`` then carries it into the batch). A large turn is
    counted when it is prepared, off the loop (``prepare_turn(count=True)``).
    """

    session_id: str
    events: list[SessionEvent]
    tokens: list[int] | None
    instructions: list[str]
    base_seq: int
    usage: Mapping[str, Any] | None
    on_conflict: Literal["append", "reject"]
    idempotency_key: str | None
    strategy: Mapping[str, Any] | None = None
    recorded: UsageTotals | None = None  # the normalised usage, stored with the turn
