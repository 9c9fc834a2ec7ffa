"""``values.records.record_bound_problem``: a compaction record covers only its past."""

from __future__ import annotations

from typing import Any

import pytest

from session_server.values.records import record_bound_problem


def summarize(**over: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "version": 1,
        "strategy": "summarize",
        "boundary_seq": 9,
        "tail_start_seq": 9,
        "tail_start_turn": 3,
        "seq_range": [1, 8],
        "episodic": [],
        "semantic": [],
    }
    record.update(over)
    return record


def test_records_within_their_session_pass() -> None:
    assert record_bound_problem(summarize(), 12) is None
    # an imported summary starts its tail right after its own event
    assert record_bound_problem(summarize(boundary_seq=13, tail_start_seq=13), 12) is None
    assert record_bound_problem({"strategy": "compact", "boundary_seq": 12}, 12) is None
    memory = {"episodic": [], "semantic": [], "tail_start_seq": 4, "tail_start_turn": 2}
    assert (
        record_bound_problem({"strategy": "compact", "boundary_seq": 5, "memory": memory}, 9)
        is None
    )


@pytest.mark.parametrize(
    ("record", "words"),
    [
        (summarize(tail_start_seq=14), "tail_start_seq 14 lies outside"),
        (summarize(boundary_seq=10**9), "boundary_seq 1000000000 lies outside"),
        (summarize(boundary_seq=-1), "boundary_seq -1"),
        (summarize(seq_range=[1, 12]), "seq_range"),
        (summarize(seq_range="1-8"), "seq_range"),
        (summarize(tail_start_turn=-2), "tail_start_turn"),
        (summarize(boundary_seq="9"), "must be an integer"),
        ({"strategy": "compact"}, "needs 'boundary_seq'"),
        ({"strategy": "rewrite", "boundary_seq": 1}, "unknown strategy"),
        (
            {
                "strategy": "compact",
                "boundary_seq": 3,
                "memory": {"episodic": [], "semantic": [], "tail_start_seq": 99,
                           "tail_start_turn": 1},
            },
            "tail_start_seq 99",
        ),
        ("not a record", "must be an object"),
    ],
)  # fmt: skip
def test_records_beyond_their_session_are_named(record: Any, words: str) -> None:
    problem = record_bound_problem(record, 12)
    assert problem is not None and words in problem, problem
