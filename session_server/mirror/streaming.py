"""The mirror files of a session, one file at a time, from a stream of events (pure).

``render_mirror`` (``model``) builds all four files in memory. A repair must not: a
session may hold 200k events, and the disk may have room for one more file only. This
module renders each file as a stream of lines from a pass over the events (oldest first),
with state that grows with the session's *compactions*, not its events:

- ``ArchivePlan`` (from the ``compaction`` events alone) says, for any trace line, which
  summarize compaction moved it to ``raw_traces_archive.jsonl``, if any. The rule is the
  model's: a line of event ``seq`` whose ``turn_id`` is ``t`` is moved by the first summarize
  compaction after ``seq`` (by seq) that lists ``t``; it stays active when none does.
- ``active_lines`` yields the lines of ``raw_traces.jsonl``; ``archive_lines`` those of
  the archive with the index of the compaction that moved them (the archive holds them in
  compaction order, then line order); ``item_lines`` the ``episodic``/``semantic`` items.
- ``StreamRender.model`` is, after a full pass, the same ``MirrorModel`` that
  ``MirrorModel.from_events`` would build: the live writer goes on from it.

The files equal ``render_mirror``'s byte for byte (a property test checks it).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..values.events import SessionEvent
from .model import AppendItems, AppendTraces, MirrorModel, turn_ids_of

__all__ = ["ArchivePlan", "StreamRender", "item_lines"]


@dataclass(frozen=True, slots=True)
class ArchivePlan:
    """Which summarize compaction moves a line: per turn id, the seqs of the compactions
    listing it (ascending) and their index in compaction order."""

    by_turn: dict[str, tuple[list[int], list[int]]] = field(default_factory=dict)
    count: int = 0

    @classmethod
    def from_compactions(cls, events: Iterable[SessionEvent]) -> ArchivePlan:
        """The plan of a session's ``compaction`` events (others are ignored), oldest first."""
        by_turn: dict[str, tuple[list[int], list[int]]] = {}
        index = 0
        for event in events:
            if event.action != "compaction":
                continue
            record = event.compaction or {}
            if record.get("strategy") != "summarize":
                continue
            turns = turn_ids_of(record.get("turn_ids"))
            if not turns:
                continue  # the model emits no archive step for it
            for turn_id in turns:
                seqs, indexes = by_turn.setdefault(turn_id, ([], []))
                seqs.append(event.seq)
                indexes.append(index)
            index += 1
        return cls(by_turn, index)

    def group_of(self, event_seq: int, turn_id: object) -> int | None:
        """The compaction (its index) that moves a line of event ``event_seq`` with
        ``turn_id`` to the archive, or ``None`` when the line stays active."""
        if not isinstance(turn_id, str):
            return None
        entry = self.by_turn.get(turn_id)
        if entry is None:
            return None
        seqs, indexes = entry
        at = bisect.bisect_right(seqs, event_seq)
        return indexes[at] if at < len(seqs) else None


class StreamRender:
    """One pass over a session's events: trace lines routed by an ``ArchivePlan``."""

    def __init__(self, plan: ArchivePlan) -> None:
        self.plan = plan
        self.model = MirrorModel()

    def _routed(self, events: Iterable[SessionEvent]) -> Iterator[tuple[int | None, Any]]:
        for event in events:
            for op in self.model.step(event):
                if isinstance(op, AppendTraces):
                    for line in op.lines:
                        yield self.plan.group_of(event.seq, line.get("turn_id")), line

    def active_lines(self, events: Iterable[SessionEvent]) -> Iterator[dict[str, Any]]:
        """The lines of ``raw_traces.jsonl``, in order."""
        for group, line in self._routed(events):
            if group is None:
                yield line

    def archive_lines(self, events: Iterable[SessionEvent]) -> Iterator[tuple[int, dict[str, Any]]]:
        """The archived lines with the compaction that moved them, in line order. The
        archive file holds them sorted by that index (stable): usually already the
        case, since compactions archive the oldest turns first."""
        for group, line in self._routed(events):
            if group is not None:
                yield group, line


def item_lines(events: Iterable[SessionEvent]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The items of ``episodic.jsonl`` and ``semantic.jsonl`` (from the compaction events;
    other events are skipped, so a pass over the compactions alone is enough)."""
    model = MirrorModel()
    episodic: list[dict[str, Any]] = []
    semantic: list[dict[str, Any]] = []
    for event in events:
        if event.action != "compaction":
            continue
        for op in model.step(event):
            if isinstance(op, AppendItems):
                (episodic if op.kind == "episodic" else semantic).extend(op.items)
    return episodic, semantic
