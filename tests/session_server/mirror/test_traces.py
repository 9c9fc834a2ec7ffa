"""Event -> raw-trace line mapping (pure)."""

from __future__ import annotations

from session_server.mirror.traces import (
    TRACE_KEY_ORDER,
    TraceState,
    apply_override,
    diff_override,
    event_to_traces,
    events_to_traces,
    format_turn_id,
    ms_from_ts,
    parse_tool_result,
    parse_turn_id,
)
from session_server.values.events import SessionEvent

from .factory import T0, agent, calls, committed, compaction, result, user


def test_user_and_assistant_lines_have_the_reference_shape() -> None:
    lines = events_to_traces(committed([user("hi", images=["u.png"]), agent("hello")]))
    assert lines[0] == {
        "id": "ev-1",
        "ts": (T0 + 1000) / 1000,
        "turn_id": "turn_0001",
        "seq": 1,
        "trace_type": "user",
        "content": "hi",
        "source_event": "LLMUserMessageReadyEvent",
        "media": {"images": ["u.png"], "audio": [], "video": []},
        "tags": ["processed"],
    }
    assert lines[1] == {
        "id": "ev-2",
        "ts": (T0 + 2000) / 1000,
        "turn_id": "turn_0001",
        "seq": 2,
        "trace_type": "assistant",
        "content": "hello",
        "source_event": "LLMCompleteResponseReceivedEvent",
        "tags": ["final"],
    }
    assert isinstance(lines[0]["ts"], float)


def test_tool_calls_one_line_each_then_the_step_text() -> None:
    evs = committed(
        [
            user("go"),
            calls(("c1", "read", {"p": "a"}), ("c2", "list", {}), content="Let me look."),
            result("c2", "list", '["x","y"]'),
            result("c1", "read", "plain text"),
            result("c9", "boom", "it failed", ok=False),
        ]
    )
    lines = events_to_traces(evs)
    assert [(ln["trace_type"], ln["seq"]) for ln in lines] == [
        ("user", 1),
        ("tool_call", 2),
        ("tool_call", 3),
        ("assistant", 4),
        ("tool_result", 5),
        ("tool_result", 6),
        ("tool_result", 7),
    ]
    call1, call2, text = lines[1], lines[2], lines[3]
    assert call1["source_event"] == "PendingToolInvocationEvent"
    assert (call1["tool_name"], call1["tool_call_id"], call1["tool_args"]) == (
        "read",
        "c1",
        {"p": "a"},
    )
    assert call1["content"] == "" and "tags" not in call1
    assert call2["id"] != call1["id"] and text["id"] not in (call1["id"], call2["id"])
    assert text["content"] == "Let me look." and text["tags"] == ["final"]
    r2, r1, err = lines[4], lines[5], lines[6]
    assert r2["source_event"] == "ToolResultEvent"
    assert r2["tool_result"] == ["x", "y"] and r2["tool_args"] == {}
    assert r1["tool_result"] == "plain text" and r1["tool_args"] == {"p": "a"}
    assert err["tool_error"] == "it failed" and "tool_result" not in err
    assert "tool_args" not in err  # no call known for c9
    for line in lines:
        assert list(line) == [k for k in TRACE_KEY_ORDER if k in line]


def test_call_without_text_has_no_assistant_line() -> None:
    lines = events_to_traces(committed([user("go"), calls(("c1", "t", {}))]))
    assert [ln["trace_type"] for ln in lines] == ["user", "tool_call"]


def test_result_keeps_turn_of_its_call_and_seq_continues_there() -> None:
    evs = committed(
        [
            user("one"),
            calls(("c1", "slow", {})),
            user("two"),
            agent("ok"),
            result("c1", "slow", "done"),
        ]
    )
    lines = events_to_traces(evs)
    late = lines[-1]
    assert (late["turn_id"], late["seq"]) == ("turn_0001", 3)
    assert [(ln["turn_id"], ln["seq"]) for ln in lines[2:4]] == [("turn_0002", 1), ("turn_0002", 2)]


def test_turn_computed_like_the_store_when_events_have_no_turn() -> None:
    evs = [
        agent("greeting"),
        user("one"),
        calls(("c1", "t", {})),
        user("two"),
        result("c1", "t", "1"),
    ]
    for i, ev in enumerate(evs):
        ev.id, ev.seq, ev.timestamp = f"e{i}", i + 1, T0
    lines = events_to_traces(evs)
    assert [ln["turn_id"] for ln in lines] == [
        "turn_0000",
        "turn_0001",
        "turn_0001",
        "turn_0002",
        "turn_0001",
    ]


def test_system_and_compaction_events_are_not_traced_but_keep_numbering() -> None:
    evs = committed(
        [
            SessionEvent(action="system_instruction", content="be nice"),
            user("a"),
            compaction({"strategy": "compact"}),
            agent("b"),
        ]
    )
    lines = events_to_traces(evs)
    assert [(ln["trace_type"], ln["seq"]) for ln in lines] == [("user", 1), ("assistant", 2)]


def test_state_rebuilt_from_events_continues_numbering() -> None:
    history = committed([user("a"), calls(("c1", "t", {"k": 1}))])
    state = TraceState.from_events(history)
    (line,) = event_to_traces(
        committed([result("c1", "t", "r")], start=3, history=history)[0], state
    )
    assert (line["seq"], line["tool_args"]) == (3, {"k": 1})


def test_overrides_from_metadata_are_applied_in_key_order() -> None:
    ev = user(
        "x", metadata={"trace": {"id": "rt_1", "ts": 5, "tags": [], "extra": 1, "_omit": ["media"]}}
    )
    (line,) = events_to_traces(committed([ev]))
    assert line["id"] == "rt_1" and line["ts"] == 5 and line["tags"] == []
    assert "media" not in line
    assert list(line)[-1] == "extra"


def test_diff_override_is_json_exact() -> None:
    derived = {"id": "a", "ts": 5.0, "content": "", "media": {}}
    original = {"id": "b", "ts": 5, "content": "", "x": None}
    override = diff_override(derived, original)
    assert override == {"id": "b", "ts": 5, "x": None, "_omit": ["media"]}
    assert apply_override(dict(derived), override) == original


def test_helpers() -> None:
    assert format_turn_id(7) == "turn_0007"
    assert parse_turn_id("turn_0012") == 12
    assert parse_turn_id("turn_x") is None and parse_turn_id(3) is None
    assert ms_from_ts(1770923379.5) == 1770923379500
    assert ms_from_ts(1770923021) == 1770923021000
    assert ms_from_ts("1") is None and ms_from_ts(True) is None and ms_from_ts(float("nan")) is None
    assert parse_tool_result('{"a": 1}') == {"a": 1}
    assert parse_tool_result("42") == 42
    assert parse_tool_result("not json") == "not json"
    assert parse_tool_result("[broken") == "[broken"
    assert parse_tool_result("") == ""
