from __future__ import annotations

from session_server.compaction.placeholders import (
    PlaceholderParams,
    call_name_index,
    compact_message,
    input_placeholder,
    output_placeholder,
    tool_selected,
)
from session_server.values.codec import event_to_message
from session_server.values.events import ContextMessage, SessionEvent, ToolCall

from .sessions import SessionLog


def test_placeholder_texts_are_exact() -> None:
    assert (
        output_placeholder("weather_api", "call_12345")
        == "⟦removed: tool output for weather_api (call_id=call_12345); reason=context_compaction⟧"
    )
    assert (
        input_placeholder("weather_api", "call_12345")
        == "⟦removed: tool input for weather_api (call_id=call_12345); reason=context_compaction⟧"
    )


def test_include_wins_over_exclude() -> None:
    none: frozenset[str] = frozenset()
    assert tool_selected("a", none, none)
    assert not tool_selected("a", none, frozenset({"a"}))
    assert tool_selected("a", frozenset({"a"}), frozenset({"a"}))
    assert not tool_selected("b", frozenset({"a"}), none)


def _pair() -> tuple[SessionEvent, SessionEvent]:
    log = SessionLog()
    log.user("hi")
    call = log.add(
        action="tool_call_request",
        content="Checking.",
        tool_calls=[
            ToolCall(id="c1", name="weather_api", arguments={"city": "Oslo"}),
            ToolCall(id="c2", name="get_user_profile", arguments={"id": 7}),
        ],
    )
    result = log.result("c1", "weather_api", "{'temperature': 72}")
    return call, result


def _msg(ev: SessionEvent) -> ContextMessage:
    msg = event_to_message(ev)
    assert msg is not None
    return msg


def test_tool_output_becomes_a_placeholder_keeping_ids() -> None:
    _, result = _pair()
    params = PlaceholderParams(boundary_seq=100)
    msg, n = compact_message(result, _msg(result), params, {})
    assert n == 1
    assert msg.role == "tool" and msg.tool_call_id == "c1" and msg.name == "weather_api"
    assert msg.content == output_placeholder("weather_api", "c1")
    assert msg.compacted is True


def test_events_at_or_after_the_boundary_are_untouched() -> None:
    _, result = _pair()
    original = _msg(result)
    msg, n = compact_message(result, original, PlaceholderParams(boundary_seq=result.seq), {})
    assert (msg, n) == (original, 0)


def test_result_without_tool_name_uses_the_call_name() -> None:
    call, result = _pair()
    result.tool_name = None
    msg, _ = compact_message(result, _msg(result), PlaceholderParams(100), call_name_index([call]))
    assert msg.content == output_placeholder("weather_api", "c1")


def test_inputs_are_kept_unless_cleared() -> None:
    call, _ = _pair()
    original = _msg(call)
    assert compact_message(call, original, PlaceholderParams(100), {}) == (original, 0)


def test_cleared_inputs_become_empty_arguments_and_content_lines() -> None:
    call, _ = _pair()
    params = PlaceholderParams(
        100, clear_tool_inputs=True, exclude_tools=frozenset({"get_user_profile"})
    )
    msg, n = compact_message(call, _msg(call), params, {})
    assert n == 1
    assert msg.compacted is True
    assert msg.tool_calls == [
        ToolCall(id="c1", name="weather_api", arguments={}),
        ToolCall(id="c2", name="get_user_profile", arguments={"id": 7}),
    ]
    assert msg.content == "Checking.\n" + input_placeholder("weather_api", "c1")


def test_excluded_output_is_kept_and_include_list_limits_compaction() -> None:
    _, result = _pair()
    excluded = PlaceholderParams(100, exclude_tools=frozenset({"weather_api"}))
    assert compact_message(result, _msg(result), excluded, {})[1] == 0
    included = PlaceholderParams(100, include_tools=frozenset({"search"}))
    assert compact_message(result, _msg(result), included, {})[1] == 0
    both = PlaceholderParams(
        100, include_tools=frozenset({"weather_api"}), exclude_tools=frozenset({"weather_api"})
    )
    assert compact_message(result, _msg(result), both, {})[1] == 1


def test_params_from_record() -> None:
    record = {
        "boundary_seq": 9,
        "params": {
            "compact_clear_tool_inputs": True,
            "compact_include_tools": ["a"],
            "compact_exclude_tools": ["b"],
        },
    }
    assert PlaceholderParams.from_record(record) == PlaceholderParams(
        9, True, frozenset({"a"}), frozenset({"b"})
    )


def test_failed_result_with_images_is_compacted_and_images_dropped() -> None:
    ev = SessionEvent(
        seq=3,
        action="tool_result",
        content="boom",
        tool_call_id="c9",
        tool_name="t",
        is_success=False,
        images=["data:image/png;base64,AAAA"],
    )
    msg, n = compact_message(ev, _msg(ev), PlaceholderParams(10), {})
    assert n == 1 and msg.images is None and msg.is_error is True
