"""The compaction record format, as the window rules read it (pure).

A record is the JSON object stored as the ``compaction`` field of a ``compaction`` event
(``compaction.records`` describes every key). The store and the agent core only need to
know where the builder's input starts (``from_seq``), so the record is decoded once,
when its row is read, into a ``CompactionRecord``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from .errors import CorruptRecordError
from .events import SessionEvent

__all__ = ["CompactionRecord", "record_bound_problem", "record_memory"]


class CompactionRecord(msgspec.Struct, frozen=True):
    """The latest compaction record of a session, decoded once when its row is read.

    ``data`` is the record as stored (what the planners and the builder take);
    ``from_seq`` is the first seq the builder needs (``tail_start_seq`` of the record's
    memory, ``None``: no lower bound). Build it with ``CompactionRecord.decode``.
    """

    data: dict[str, Any]
    strategy: str
    from_seq: int | None = None

    @classmethod
    def decode(cls, data: Mapping[str, Any]) -> CompactionRecord:
        """Check ``data`` and decode what the window rules need; ``CorruptRecordError``
        when it is not a record this program can apply."""
        if not isinstance(data, Mapping):
            raise CorruptRecordError(
                "compaction record: must be an object", data={"field": "compaction"}
            )
        memory = record_memory(data)
        return cls(
            data=dict(data),
            strategy=str(data.get("strategy")),
            from_seq=None if memory is None else int(memory["tail_start_seq"]),
        )

    @classmethod
    def of(cls, event: SessionEvent) -> CompactionRecord | None:
        """The record an event carries (``None`` unless it is a ``compaction`` event)."""
        if event.action != "compaction" or event.compaction is None:
            return None
        return cls.decode(event.compaction)


def _int_key(record: Mapping[str, Any], key: str, where: str) -> int:
    value = record.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise CorruptRecordError(
            f"compaction record: {where}{key!r} must be an integer, got {value!r}",
            data={"field": f"compaction.{where}{key}"},
        )
    return value


def record_memory(record: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The summarize memory a record carries (its own, or a compact record's ``memory``).

    Returns ``{episodic, semantic, tail_start_seq, tail_start_turn}`` or ``None``. Raises
    ``CorruptRecordError`` when the keys are missing or of the wrong type.
    """
    if record is None:
        return None
    strategy = record.get("strategy")
    if strategy == "summarize":
        source, where = record, ""
    elif strategy == "compact":
        memory = record.get("memory")
        if memory is None:
            return None
        if not isinstance(memory, Mapping):
            raise CorruptRecordError(
                "compaction record: 'memory' must be an object", data={"field": "memory"}
            )
        source, where = memory, "memory."
    else:
        raise CorruptRecordError(
            f"compaction record: unknown strategy {strategy!r}", data={"field": "strategy"}
        )
    episodic, semantic = source.get("episodic"), source.get("semantic")
    if not isinstance(episodic, list) or not isinstance(semantic, list):
        raise CorruptRecordError(
            f"compaction record: {where}'episodic' and {where}'semantic' must be lists",
            data={"field": f"compaction.{where}episodic"},
        )
    return {
        "episodic": episodic,
        "semantic": semantic,
        "tail_start_seq": _int_key(source, "tail_start_seq", where),
        "tail_start_turn": _int_key(source, "tail_start_turn", where),
    }


def _bound(record: Mapping[str, Any], key: str, low: int, high: int, where: str) -> str | None:
    value = record.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{where}{key} must be an integer, not {value!r}"[:200]
    if not low <= value <= high:
        return f"{where}{key} {value} lies outside the session ({low}..{high})"
    return None


def record_bound_problem(record: Any, seq: int) -> str | None:
    """What is wrong with the compaction record of the event at ``seq`` (``None``: it is
    one the builder can apply and its bounds lie within its session).

    A record covers only events before it: ``boundary_seq`` and the memory's
    ``tail_start_seq`` are at most ``seq + 1`` (an imported summary starts its tail
    right after its own event), and ``seq_range`` lies before ``seq``. A bound beyond
    that would hide every later turn behind the record's summary.
    """
    try:
        decoded = CompactionRecord.decode(record)
    except CorruptRecordError as exc:
        return exc.message
    data = decoded.data
    if data.get("strategy") == "compact" and "boundary_seq" not in data:
        return "compaction record: a compact record needs 'boundary_seq'"
    problem = _bound(data, "boundary_seq", 0, seq + 1, "compaction record: ")
    memory = record_memory(data)
    if problem is None and memory is not None:
        problem = _bound(memory, "tail_start_seq", 0, seq + 1, "compaction record: ")
        if problem is None and memory["tail_start_turn"] < 0:
            problem = "compaction record: tail_start_turn must not be negative"
    span = data.get("seq_range")
    if problem is None and span is not None:
        ok = (
            isinstance(span, list)
            and len(span) == 2
            and all(type(v) is int for v in span)
            and 0 <= span[0] <= span[1] < seq
        )
        if not ok:
            problem = f"compaction record: seq_range {span!r} does not lie before seq {seq}"[:200]
    return problem
