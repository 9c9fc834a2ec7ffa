"""The lineage rules (pure): each operation's segments against a model of "which stored
row each seq reads", and the erasure rule (``uncovered``) against a set model."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from session_server.values.lineage import (
    OPEN,
    Segment,
    clip,
    fork_lineage,
    hide,
    merge_ranges,
    own_lineage,
    repoint,
    rewind_lineage,
    uncovered,
)

TOP = 40  # seqs looked at by the models


def reads(session: str, lineage: list[Segment] | None) -> dict[int, str]:
    """seq -> owner of the row the session reads there (the model of a lineage)."""
    out: dict[int, str] = {}
    for seg in own_lineage(session) if lineage is None else lineage:
        for seq in range(seg.lo, min(seg.hi, TOP) + 1):
            assert seq not in out, "segments overlap"
            out[seq] = seg.owner
    return out


def well_formed(lineage: list[Segment]) -> None:
    for a, b in itertools.pairwise(lineage):
        assert a.hi < b.lo, lineage
        assert not (a.owner == b.owner and a.hi + 1 == b.lo), f"not merged: {lineage}"


def test_a_fork_reads_its_source_up_to_the_point_then_its_own_rows() -> None:
    assert fork_lineage("p", None, 10, "f") == [Segment(0, 10, "p"), Segment(11, OPEN, "f")]
    deeper = fork_lineage("f", fork_lineage("p", None, 10, "f"), 15, "g")
    assert deeper == [Segment(0, 10, "p"), Segment(11, 15, "f"), Segment(16, OPEN, "g")]
    # a fork before the grandparent's fork point reads only the grandparent
    assert fork_lineage("f", fork_lineage("p", None, 10, "f"), 4, "h") == [
        Segment(0, 4, "p"),
        Segment(5, OPEN, "h"),
    ]


def test_a_rewind_skips_the_abandoned_range() -> None:
    assert rewind_lineage("s", None, 6, 12) == [Segment(0, 6, "s"), Segment(13, OPEN, "s")]


def test_segments_refuse_empty_ranges() -> None:
    with pytest.raises(ValueError):
        Segment(5, 4, "x")
    with pytest.raises(ValueError):
        Segment(-1, 4, "x")


Ops = list[tuple[str, int]]
_OPS = st.lists(
    st.tuples(st.sampled_from(["fork", "rewind", "hide", "repoint"]), st.integers(0, TOP)),
    max_size=12,
)


@given(_OPS)
def test_operations_read_what_the_model_says(ops: Ops) -> None:
    """Each rule applied to a random lineage reads, seq by seq, what the model says."""
    lineage: list[Segment] | None = None
    session = "s0"
    for n, (kind, seq) in enumerate(ops):
        before = reads(session, lineage)
        if kind == "fork":
            new = f"s{n + 1}"
            lineage = fork_lineage(session, lineage, seq, new)
            expect = {k: v for k, v in before.items() if k <= seq}
            expect.update({k: new for k in range(seq + 1, TOP + 1)})
            session = new
        elif kind == "rewind":
            rewind_seq = seq + 3
            lineage = rewind_lineage(session, lineage, seq, rewind_seq)
            expect = {k: v for k, v in before.items() if k <= seq}
            expect.update({k: session for k in range(rewind_seq + 1, TOP + 1)})
        elif kind == "hide":
            lineage = hide(session, lineage, [seq, seq + 2])
            expect = {k: v for k, v in before.items() if k not in (seq, seq + 2)}
        else:
            lineage = repoint(lineage or own_lineage(session), seq, "held")
            expect = {**before, seq: "held"}
        well_formed(lineage)
        assert reads(session, lineage) == expect, (kind, seq, lineage)


@given(
    st.lists(st.tuples(st.integers(0, TOP), st.integers(0, 6))),
    st.integers(0, TOP),
    st.integers(0, TOP),
)
def test_uncovered_is_the_complement_of_the_covered_ranges(
    spans: list[tuple[int, int]], lo: int, width: int
) -> None:
    ranges = [(a, a + w) for a, w in spans]
    hi = lo + width
    covered = {s for a, b in ranges for s in range(a, b + 1)}
    gaps = uncovered(ranges, lo, hi)
    assert {s for a, b in gaps for s in range(a, b + 1)} == {
        s for s in range(lo, hi + 1) if s not in covered
    }
    assert merge_ranges(gaps) == gaps  # disjoint, sorted, not adjacent


def test_clip_cuts_the_last_segment() -> None:
    assert clip([Segment(0, 5, "a"), Segment(6, OPEN, "b")], 7) == [
        Segment(0, 5, "a"),
        Segment(6, 7, "b"),
    ]
    assert clip([Segment(3, 5, "a")], 2) == []
