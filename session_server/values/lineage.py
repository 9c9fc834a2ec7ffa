"""A session's history as segments of stored rows: zero-copy forks and rewinds (pure).

A session whose history is only its own rows (a root session, a session imported or made
before lineage existed) has no segments: it reads ``events WHERE session_id = ?`` as it
always did. A fork, a rewound session or a session that hid an inherited row has a
lineage: an ordered list of ``Segment(lo, hi, owner)``, each saying "the rows of
``owner`` with ``lo <= seq <= hi``", the seq ranges disjoint and increasing. Its last
segment is usually its own open range (``hi = OPEN``), where its new events land.

The rules here decide the segments of each operation; ``storage.lineage_sql`` stores and
reads them. A stored row is live while some session reads it (``covered``); the rest is
erased (``uncovered``), which is how a deleted parent's rows stay exactly as long as a
fork still reads them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

import msgspec

__all__ = [
    "OPEN",
    "Segment",
    "clip",
    "fork_lineage",
    "hide",
    "merge_ranges",
    "own_lineage",
    "repoint",
    "rewind_lineage",
    "uncovered",
]

OPEN: Final = (1 << 62) - 1
"""The ``hi`` of an open segment: every later seq."""


class Segment(msgspec.Struct, frozen=True):
    """The rows of ``owner`` with ``lo <= seq <= hi`` (``hi = OPEN``: no upper end)."""

    lo: int
    hi: int
    owner: str

    def __post_init__(self) -> None:
        if self.lo < 0 or self.hi < self.lo:
            raise ValueError(f"segment [{self.lo}, {self.hi}] is empty or negative")


def own_lineage(session_id: str) -> list[Segment]:
    """The lineage a session without one reads implicitly: all its own rows."""
    return [Segment(0, OPEN, session_id)]


def clip(lineage: Sequence[Segment], hi: int) -> list[Segment]:
    """``lineage`` cut to the seqs ``<= hi``."""
    out: list[Segment] = []
    for seg in lineage:
        if seg.lo > hi:
            break
        out.append(seg if seg.hi <= hi else Segment(seg.lo, hi, seg.owner))
    return out


def _normal(segments: Iterable[Segment]) -> list[Segment]:
    """Adjacent segments of one owner merged (fewer arms in every read)."""
    out: list[Segment] = []
    for seg in segments:
        if out and out[-1].owner == seg.owner and out[-1].hi + 1 >= seg.lo:
            last = out.pop()
            out.append(Segment(last.lo, max(last.hi, seg.hi), last.owner))
        else:
            out.append(seg)
    return out


def fork_lineage(source: str, source_lineage: Sequence[Segment] | None, at: int,
                 new_id: str) -> list[Segment]:  # fmt: skip
    """The lineage of ``new_id`` forked from ``source`` at ``at``: the source's history
    up to ``at`` (its own lineage cut there), then the fork's own rows."""
    base = own_lineage(source) if source_lineage is None else source_lineage
    return _normal([*clip(base, at), Segment(at + 1, OPEN, new_id)])


def rewind_lineage(session_id: str, lineage: Sequence[Segment] | None, point: int,
                   rewind_seq: int) -> list[Segment]:  # fmt: skip
    """The lineage of ``session_id`` rewound to ``point`` at ``rewind_seq``: its history up
    to ``point``, then its own rows after the rewind (the abandoned range is skipped)."""
    base = own_lineage(session_id) if lineage is None else lineage
    return _normal([*clip(base, point), Segment(rewind_seq + 1, OPEN, session_id)])


def hide(session_id: str, lineage: Sequence[Segment] | None,
         seqs: Iterable[int]) -> list[Segment]:  # fmt: skip
    """``lineage`` without the given seqs (a delete of rows other sessions still read:
    the session stops reading them, the rows stay for the others)."""
    gone = sorted(set(seqs))
    out: list[Segment] = []
    for seg in own_lineage(session_id) if lineage is None else lineage:
        lo = seg.lo
        for s in gone:
            if s < lo or s > seg.hi:
                continue
            if s > lo:
                out.append(Segment(lo, s - 1, seg.owner))
            lo = s + 1
        if lo <= seg.hi:
            out.append(Segment(lo, seg.hi, seg.owner))
    return _normal(out)


def merge_ranges(ranges: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Inclusive seq ranges merged and sorted."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def uncovered(covered: Iterable[tuple[int, int]], lo: int = 0,
              hi: int = OPEN) -> list[tuple[int, int]]:  # fmt: skip
    """The seq ranges within ``[lo, hi]`` that no range of ``covered`` includes: the rows
    of an owner no session reads any more (to erase)."""
    out: list[tuple[int, int]] = []
    nxt = lo
    for a, b in merge_ranges(covered):
        if b < nxt:
            continue
        if a > hi:
            break
        if a > nxt:
            out.append((nxt, a - 1))
        nxt = max(nxt, b + 1)
    if nxt <= hi:
        out.append((nxt, hi))
    return out


def repoint(lineage: Sequence[Segment], seq: int, owner: str) -> list[Segment]:
    """``lineage`` reading the row at ``seq`` from ``owner`` instead (a row rewritten in
    one session while others keep the old one)."""
    out: list[Segment] = []
    placed = False
    for seg in lineage:
        if not placed and seq < seg.lo:
            out.append(Segment(seq, seq, owner))
            placed = True
        if seg.lo <= seq <= seg.hi:
            if seg.lo < seq:
                out.append(Segment(seg.lo, seq - 1, seg.owner))
            out.append(Segment(seq, seq, owner))
            placed = True
            if seq < seg.hi:
                out.append(Segment(seq + 1, seg.hi, seg.owner))
        else:
            out.append(seg)
    if not placed:
        out.append(Segment(seq, seq, owner))
    return _normal(out)
