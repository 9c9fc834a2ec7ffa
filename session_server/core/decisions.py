"""What ``AgentCore`` decides: the values its answers carry to the actor (pure).

``AppendPlan`` (one store transaction and the snapshot after it), ``CompactionDue`` and
``CompactionInput`` (a compaction to run and what it plans from), ``PlaceholderFallback``,
``StrategyWrite``, ``PreparedTurn`` (a validated persist request) and ``SnapshotParts``.
The values the store also sees are in ``core.plans``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import msgspec

from ..compaction.config import StrategyConfig
from ..compaction.records import CompactionPlan
from .events import ContextMessage, SessionEvent
from .plans import AppendBatch, SnapshotDue
from .records import CompactionRecord

__all__ = [
    "AppendPlan",
    "CompactionDue",
    "CompactionInput",
    "PlaceholderFallback",
    "PreparedTurn",
    "SnapshotParts",
    "StrategyWrite",
]

SnapshotParts = tuple[list[ContextMessage], list[str], int]


class AppendPlan(msgspec.Struct, frozen=True):
    """One store transaction, and the snapshot to write once it committed.

    ``removals``: the session's removal count (``CoreState.removals``) the plan was made
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

    @property
    def record_data(self) -> dict[str, Any] | None:
        return None if self.record is None else self.record.data


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
