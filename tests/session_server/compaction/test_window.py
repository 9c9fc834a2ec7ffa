from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from session_server.compaction.window import event_turns, safe_cuts, user_turn_starts
from session_server.values.events import SessionEvent, ToolCall
from session_server.values.turns import assign_turns, splits_tool_pair

from .sessions import tool_session

ops = st.lists(
    st.tuples(st.sampled_from(["user", "call", "result", "answer"]), st.integers(0, 4)), max_size=30
)


def _events(spec: list[tuple[str, int]]) -> list[SessionEvent]:
    out = []
    for i, (kind, k) in enumerate(spec, 1):
        if kind == "user":
            out.append(SessionEvent(seq=i, action="user_message"))
        elif kind == "call":
            out.append(
                SessionEvent(seq=i, action="tool_call_request", tool_calls=[ToolCall(f"c{k}", "t")])
            )
        elif kind == "result":
            out.append(SessionEvent(seq=i, action="tool_result", tool_call_id=f"c{k}"))
        else:
            out.append(SessionEvent(seq=i, action="agent_message"))
    return out


@given(ops)
def test_safe_cuts_agrees_with_splits_tool_pair(spec: list[tuple[str, int]]) -> None:
    events = _events(spec)
    cuts = safe_cuts(events)
    assert len(cuts) == len(events) + 1
    for i in range(len(events) + 1):
        assert cuts[i] == (not splits_tool_pair(events, i)), i


def test_event_turns_prefers_stored_turns() -> None:
    log = tool_session(3)
    assert event_turns(log.events) == [e.turn for e in log.events]
    bare = [
        SessionEvent(
            seq=e.seq, action=e.action, tool_calls=e.tool_calls, tool_call_id=e.tool_call_id
        )
        for e in log.events
    ]
    assert event_turns(bare) == assign_turns(bare)[0]
    assert event_turns(bare[4:], last_turn=1) == [2, 2, 2, 2, 3, 3, 3, 3]
    assert user_turn_starts(log.events, event_turns(log.events)) == [(1, 0), (2, 4), (3, 8)]
