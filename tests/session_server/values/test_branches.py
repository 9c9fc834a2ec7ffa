"""The rewind point rule and the answers' shapes (pure)."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from session_server.values.branches import Abandoned, RewindResult, rewind_point
from session_server.values.events import ACTIONS, SessionEvent
from session_server.values.turns import number_turns


def test_a_boundary_stays() -> None:
    assert rewind_point(4, None, 0) == 4  # nothing follows
    assert rewind_point(4, "user_message", 5) == 4  # a new turn follows
    assert rewind_point(2, "system_instruction", 0) == 2  # before the first turn


def test_inside_a_turn_moves_to_its_start() -> None:
    assert rewind_point(6, "tool_result", 5) == 4
    assert rewind_point(5, "agent_message", 5) == 4  # the user message alone is no turn
    assert rewind_point(1, "agent_message", 1) == 0


def test_a_negative_seq_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="to_seq"):
        rewind_point(-1, None, 0)


_ACTIONS = st.sampled_from([a for a in ACTIONS if a not in ("compaction", "tool_result")])


@given(st.lists(_ACTIONS, max_size=30), st.data())
def test_the_point_is_never_inside_a_turn(actions: list[str], data: st.DataObject) -> None:
    """Whatever the log and the requested seq, the events kept are whole turns: the first
    event after the point opens a turn (or belongs to none), and the point is at most the
    requested seq and moves back only as far as the start of that seq's turn."""
    events = [SessionEvent(action=a, content=str(i)) for i, a in enumerate(actions)]  # type: ignore[arg-type]
    positions, _ = number_turns(events)
    to_seq = data.draw(st.integers(0, len(events)))
    after = events[to_seq] if to_seq < len(events) else None
    start = positions[to_seq].start_seq if to_seq < len(events) else 0
    point = rewind_point(to_seq, None if after is None else after.action, start)
    assert 0 <= point <= to_seq
    if point < len(events):
        first_dropped = events[point]
        assert first_dropped.action == "user_message" or positions[point].start_seq == 0
    if point < to_seq:  # moved: everything between is the same turn as to_seq's successor
        assert {p.start_seq for p in positions[point : to_seq + 1]} == {point + 1}


def test_the_rewind_answer_encodes_as_the_design_names_it() -> None:
    result = RewindResult(
        session_id="s", to_seq=4, rewind_seq=9, abandoned=Abandoned(5, 8),
        branch_session_id="b", requested_to_seq=6, moved_to_turn_start=True,
    )  # fmt: skip
    out = result.to_builtins()
    assert out == msgspec.to_builtins(result)
    assert set(out) >= {"session_id", "to_seq", "rewind_seq", "abandoned", "branch_session_id"}
    assert out["abandoned"] == {"from_seq": 5, "to_seq": 8}
