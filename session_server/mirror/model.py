"""What the mirror files of one session should contain (pure).

``MirrorModel`` turns each committed event into file operations: append trace lines to the
active file, move the lines of summarised turns to the archive, append new episodic and
semantic items. The live writer executes the operations on files as events commit;
``render_mirror`` executes the same operations on in-memory lists for a whole session, so
the live files and a fresh rendering are equal by construction (that equality is what
reconciliation and export rely on).

Compaction records (``SessionEvent.compaction``): ``strategy`` ``"summarize"`` moves the
lines whose ``turn_id`` is in ``turn_ids`` from the active file to the archive (lines
written later stay active) and appends the ``episodic``/``semantic`` items not written
yet (an item is known by its ``id``, or by its JSON when it has none); ``"compact"``
(placeholders) touches no file. Every compaction starts a new snapshot epoch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from ..values.events import SessionEvent
from .traces import TraceState, event_to_traces, format_turn_id, ts_from_ms

__all__ = [
    "AppendItems",
    "AppendTraces",
    "ArchiveTurns",
    "MirrorGap",
    "MirrorModel",
    "MirrorOp",
    "RenderedMirror",
    "render_mirror",
    "turn_ids_of",
]

_ENCODER: Final = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class AppendTraces:
    """Append these lines to ``raw_traces.jsonl``."""

    lines: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class ArchiveTurns:
    """Move the active lines of these turns to ``raw_traces_archive.jsonl``."""

    turn_ids: frozenset[str]


@dataclass(frozen=True, slots=True)
class AppendItems:
    """Append items to ``episodic.jsonl`` (kind ``"episodic"``) or ``semantic.jsonl``."""

    kind: str
    items: list[dict[str, Any]]


MirrorOp = AppendTraces | ArchiveTurns | AppendItems


class MirrorGap(Exception):
    """A model restored from a checkpoint cannot number this event's lines exactly (it
    belongs to a turn older than the checkpoint kept): the session needs a repair."""


def _item_key(item: dict[str, Any]) -> str:
    item_id = item.get("id")
    if isinstance(item_id, str | int) and not isinstance(item_id, bool):
        return f"id:{item_id}"
    return "json:" + _ENCODER.encode(item).decode("utf-8")


def turn_ids_of(raw: object) -> frozenset[str]:
    """The turn ids an episodic item's ``turn_ids`` names (strings, or turn numbers);
    anything else in the list is ignored (readers are lenient)."""
    out: set[str] = set()
    if isinstance(raw, list):
        for t in raw:
            if isinstance(t, str):
                out.add(t)
            elif isinstance(t, int) and not isinstance(t, bool):
                out.add(format_turn_id(t))
    return frozenset(out)


class MirrorModel:
    """Per-session mirror state; ``step`` maps one event to file operations."""

    __slots__ = (
        "compactions",
        "floor_turn",
        "item_keys",
        "last_compaction_ts",
        "last_seq",
        "traces",
    )

    def __init__(self) -> None:
        self.traces = TraceState()
        self.compactions = 0
        self.last_compaction_ts: float | None = None
        self.item_keys: dict[str, set[str]] = {"episodic": set(), "semantic": set()}
        self.last_seq = 0
        # Restored from a checkpoint (``mirror.checkpoint``): line counters of turns below
        # this one were dropped unless a pending call needs them. 0: the model saw everything.
        self.floor_turn = 0

    @classmethod
    def from_events(cls, events: Iterable[SessionEvent]) -> MirrorModel:
        model = cls()
        for event in events:
            model.step(event)
        return model

    @property
    def epoch_id(self) -> int:
        """1 for a session never compacted, +1 for every compaction since."""
        return 1 + self.compactions

    def step(self, event: SessionEvent) -> list[MirrorOp]:
        """The file operations of ``event``; ``MirrorGap`` when a checkpointed model
        cannot number its lines exactly (nothing changed then)."""
        if self.floor_turn and event.action not in ("system_instruction", "compaction"):
            self._check_gap(event)
        self.last_seq = max(self.last_seq, event.seq)
        lines = event_to_traces(event, self.traces)
        if event.action != "compaction":
            return [AppendTraces(lines)] if lines else []
        self.compactions += 1
        self.last_compaction_ts = ts_from_ms(event.timestamp)
        record = event.compaction or {}
        if record.get("strategy") != "summarize":
            return []
        ops: list[MirrorOp] = []
        turns = turn_ids_of(record.get("turn_ids"))
        if turns:
            ops.append(ArchiveTurns(turns))
        for kind in ("episodic", "semantic"):
            new = self._new_items(kind, record.get(kind))
            if new:
                ops.append(AppendItems(kind, new))
        return ops

    def _check_gap(self, event: SessionEvent) -> None:
        traces = self.traces
        turn = event.turn
        if turn is None and event.action == "tool_result":
            call_id = event.tool_call_id or ""
            if call_id not in traces.call_turns:
                raise MirrorGap(f"event seq {event.seq}: the turn of call {call_id!r}")
            turn = traces.call_turns[call_id]
        if turn is not None and turn < self.floor_turn and turn not in traces.next_seq:
            raise MirrorGap(f"event seq {event.seq}: line numbers of turn {turn}")

    def _new_items(self, kind: str, raw: object) -> list[dict[str, Any]]:
        if not isinstance(raw, list):
            return []
        seen = self.item_keys[kind]
        new: list[dict[str, Any]] = []
        for item in raw:
            if not isinstance(item, dict):
                continue
            key = _item_key(item)
            if key not in seen:
                seen.add(key)
                new.append(item)
        return new


@dataclass(slots=True)
class RenderedMirror:
    """The four JSONL files of a session as lists of objects (empty list: no file)."""

    active: list[dict[str, Any]] = field(default_factory=list)
    archive: list[dict[str, Any]] = field(default_factory=list)
    episodic: list[dict[str, Any]] = field(default_factory=list)
    semantic: list[dict[str, Any]] = field(default_factory=list)
    model: MirrorModel = field(default_factory=MirrorModel)

    def apply(self, op: MirrorOp) -> None:
        if isinstance(op, AppendTraces):
            self.active.extend(op.lines)
        elif isinstance(op, ArchiveTurns):
            keep: list[dict[str, Any]] = []
            for line in self.active:
                (self.archive if line.get("turn_id") in op.turn_ids else keep).append(line)
            self.active = keep
        elif op.kind == "episodic":
            self.episodic.extend(op.items)
        else:
            self.semantic.extend(op.items)


def render_mirror(events: Iterable[SessionEvent]) -> RenderedMirror:
    """The mirror files a session's events (oldest first) produce."""
    out = RenderedMirror()
    for event in events:
        for op in out.model.step(event):
            out.apply(op)
    return out
