"""Compaction records, the plan that carries one, and the ``compaction`` event (pure).

A record is a JSON object stored as the ``compaction`` field of a ``compaction`` event.
Only the latest record matters: it says everything the builder needs.

Common keys: ``version`` (1), ``strategy`` (``compact``|``summarize``), ``params`` (every
``StrategyConfig`` parameter used), ``boundary_seq`` and ``boundary_turn`` (the first
seq/turn left as it is), ``triggers`` (names of what fired, or ``["explicit"]``),
``tokens_before``/``tokens_after`` (tokens of the built context, when counted),
``created_at`` (ms).

- compact: ``removed_items`` (placeholders in the context under this record),
  ``new_items`` (placeholders this record added over the previous one), and ``memory``
  (``{episodic, semantic, tail_start_seq, tail_start_turn}``) when it follows a
  summarize record, so the memory is not lost.
- summarize: ``episodic``, ``semantic`` (the accumulated memory), ``added``
  (``{episodic: [ids], semantic: [ids]}`` new in this record), ``turn_ids`` covered
  (``turn_0001``...), ``seq_range`` ``[first, last]`` covered, ``tail_start_seq``,
  ``tail_start_turn``, ``summarizer`` (its name).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..values.codec import new_event_id, now_ms
from ..values.events import SessionEvent

__all__ = [
    "RECORD_VERSION",
    "CompactionPlan",
    "latest_record",
    "make_compaction_event",
]

RECORD_VERSION: Final = 1


@dataclass(frozen=True)
class CompactionPlan:
    """The outcome of planning one compaction.

    ``record`` is the new record to append (``None``: nothing to do, ``reason`` says
    why); ``event_count`` is the number of events the record newly covers (the event's
    ``compacted_event_count``); ``items_removed`` the placeholders it added (compact).
    """

    strategy: str
    record: dict[str, Any] | None
    reason: str
    event_count: int = 0
    items_removed: int = 0
    tokens_before: int | None = None
    tokens_after: int | None = None

    @property
    def changed(self) -> bool:
        return self.record is not None


def make_compaction_event(
    session_id: str, record: Mapping[str, Any], count: int, *, timestamp: int | None = None
) -> SessionEvent:
    """The ``compaction`` event to append for ``record`` (seq 0: the store assigns it)."""
    strategy = record.get("strategy", "?")
    boundary = record.get("boundary_seq")
    content = f"{strategy} compaction: {count} events before seq {boundary}"
    return SessionEvent(
        id=new_event_id(),
        session_id=session_id,
        seq=0,
        timestamp=now_ms() if timestamp is None else timestamp,
        action="compaction",
        content=content,
        compacted_event_count=count,
        compaction=dict(record),
    )


def latest_record(events: Sequence[SessionEvent]) -> dict[str, Any] | None:
    """The record of the last ``compaction`` event among ``events`` (oldest first)."""
    for ev in reversed(events):
        if ev.action == "compaction" and ev.compaction is not None:
            return ev.compaction
    return None
