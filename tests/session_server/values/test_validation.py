"""Validation of caller-supplied messages and events: refusals name the field path."""

from __future__ import annotations

from typing import Any

import pytest

from session_server.values.errors import InvalidParamsError
from session_server.values.events import ContextMessage, SessionEvent, ToolCall
from session_server.values.validation import (
    parse_event,
    parse_events,
    parse_message,
    parse_messages,
)

OK_USER = {"role": "user", "content": "hi"}


def refused(call: Any, *args: Any) -> InvalidParamsError:
    with pytest.raises(InvalidParamsError) as info:
        call(*args)
    err = info.value
    assert err.code == -32602
    return err


def in_batch(bad: Any) -> list[Any]:
    """``bad`` as the third message of a batch (index 2)."""
    return [OK_USER, {"role": "assistant", "content": "yo"}, bad]


class TestParseMessage:
    def test_valid_messages(self) -> None:
        assert parse_message(OK_USER) == ContextMessage(role="user", content="hi")
        msg = parse_message(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": "c1", "name": "f", "arguments": {"a": [1]}}],
            }
        )
        assert msg.tool_calls == [ToolCall("c1", "f", {"a": [1]})]
        tool = parse_message({"role": "tool", "content": "42", "tool_call_id": "c1", "name": "f"})
        assert tool.tool_call_id == "c1"

    def test_content_may_be_omitted(self) -> None:
        assert (
            parse_message({"role": "assistant", "tool_calls": [{"id": "c", "name": "f"}]}).content
            == ""
        )

    def test_unknown_role(self) -> None:
        err = refused(parse_messages, in_batch({"role": "robot", "content": "x"}))
        assert err.message.startswith("messages[2].role: ")
        assert "robot" in err.message
        assert "system, user, assistant, tool" in err.message
        assert err.data == {"field": "messages[2].role"}

    def test_missing_role(self) -> None:
        err = refused(parse_messages, in_batch({"content": "x"}))
        assert err.message.startswith("messages[2].role: ")
        assert "missing" in err.message

    def test_tool_message_without_tool_call_id(self) -> None:
        err = refused(parse_messages, in_batch({"role": "tool", "content": "42"}))
        assert err.message == "messages[2].tool_call_id: required for role 'tool'"
        assert err.data == {"field": "messages[2].tool_call_id"}

    def test_tool_message_with_empty_tool_call_id(self) -> None:
        err = refused(
            parse_messages, in_batch({"role": "tool", "content": "42", "tool_call_id": ""})
        )
        assert err.message.startswith("messages[2].tool_call_id: ")

    @pytest.mark.parametrize("content", [42, None, ["a"], {"text": "x"}, True])
    def test_content_not_a_string(self, content: Any) -> None:
        err = refused(parse_messages, in_batch({"role": "user", "content": content}))
        assert err.message.startswith("messages[2].content: ")
        assert "str" in err.message
        assert err.data == {"field": "messages[2].content"}

    @pytest.mark.parametrize("arguments", ['{"a":1}', '{"a": tru', [1, 2], 3, 1.5, None])
    def test_non_object_arguments_are_kept_as_sent(self, arguments: Any) -> None:
        # What a model really sends (malformed JSON, a bare value) is never refused.
        sent = {
            "role": "assistant",
            "tool_calls": [{"id": "c", "name": "f", "arguments": arguments}],
        }
        (msg,) = parse_messages([sent])
        assert msg.tool_calls is not None
        assert msg.tool_calls[0].arguments == arguments

    def test_tool_call_without_id_or_name(self) -> None:
        err = refused(
            parse_messages, in_batch({"role": "assistant", "tool_calls": [{"name": "f"}]})
        )
        assert err.message.startswith("messages[2].tool_calls[0].id: ")
        err = refused(
            parse_messages,
            in_batch({"role": "assistant", "tool_calls": [{"id": "c"}, {"id": "d", "name": ""}]}),
        )
        assert err.message.startswith("messages[2].tool_calls[0].name: ")

    def test_empty_tool_call_name(self) -> None:
        err = refused(
            parse_messages,
            in_batch(
                {
                    "role": "assistant",
                    "tool_calls": [{"id": "c", "name": "f"}, {"id": "d", "name": ""}],
                }
            ),
        )
        assert err.message == "messages[2].tool_calls[1].name: must be a non-empty string"

    def test_tool_calls_on_a_non_assistant_message(self) -> None:
        err = refused(
            parse_messages,
            in_batch({"role": "user", "content": "x", "tool_calls": [{"id": "c", "name": "f"}]}),
        )
        assert err.message.startswith("messages[2].tool_calls: ")

    def test_unknown_field(self) -> None:
        err = refused(parse_messages, in_batch({"role": "user", "content": "x", "colour": "red"}))
        assert err.message.startswith("messages[2].colour: ")
        assert "unknown field" in err.message

    @pytest.mark.parametrize("bad", ["text", 3, None, ["role", "user"]])
    def test_message_not_an_object(self, bad: Any) -> None:
        err = refused(parse_messages, in_batch(bad))
        assert err.message.startswith("messages[2]: must be an object")
        assert err.data == {"field": "messages[2]"}

    def test_messages_not_a_list(self) -> None:
        err = refused(parse_messages, {"role": "user"})
        assert err.message.startswith("messages: ")

    def test_custom_path(self) -> None:
        err = refused(parse_message, {"role": "user", "content": 1}, "params.message")
        assert err.message.startswith("params.message.content: ")

    def test_wrong_type_flag(self) -> None:
        err = refused(parse_message, {"role": "tool", "tool_call_id": "c", "is_error": "yes"})
        assert err.message.startswith("message.is_error: ")


class TestParseEvent:
    def test_valid_events(self) -> None:
        events = parse_events(
            [
                {"action": "user_message", "content": "hi"},
                {"action": "tool_call_request", "tool_calls": [{"id": "c", "name": "f"}]},
                {"action": "tool_result", "content": "1", "tool_call_id": "c", "is_success": False},
                {"action": "compaction", "content": "s", "compacted_event_count": 3},
            ]
        )
        assert [e.action for e in events] == [
            "user_message",
            "tool_call_request",
            "tool_result",
            "compaction",
        ]
        assert events[2].is_success is False

    def test_server_assigned_fields_may_be_omitted(self) -> None:
        assert parse_event({"action": "agent_message", "content": "x"}) == SessionEvent(
            action="agent_message", content="x"
        )

    def test_unknown_action(self) -> None:
        err = refused(parse_events, [{"action": "user_message"}, {"action": "shout"}])
        assert err.message.startswith("events[1].action: ")
        assert "user_message, agent_message" in err.message

    def test_tool_result_without_tool_call_id(self) -> None:
        err = refused(parse_events, [{"action": "tool_result", "content": "1"}])
        assert err.message.startswith("events[0].tool_call_id: ")

    def test_tool_call_request_without_calls(self) -> None:
        err = refused(parse_events, [{"action": "tool_call_request", "tool_calls": []}])
        assert err.message.startswith("events[0].tool_calls: ")

    def test_tool_calls_on_another_action(self) -> None:
        err = refused(
            parse_event, {"action": "agent_message", "tool_calls": [{"id": "c", "name": "f"}]}
        )
        assert err.message.startswith("event.tool_calls: ")

    def test_non_object_arguments_are_kept_as_sent(self) -> None:
        sent = {
            "action": "tool_call_request",
            "tool_calls": [{"id": "c", "name": "f", "arguments": "x"}],
        }
        (event,) = parse_events([sent])
        assert event.tool_calls is not None
        assert event.tool_calls[0].arguments == "x"

    def test_content_not_a_string(self) -> None:
        err = refused(parse_events, [{"action": "user_message", "content": 5}])
        assert err.message.startswith("events[0].content: ")

    def test_seq_must_be_an_integer(self) -> None:
        err = refused(parse_events, [{"action": "user_message", "seq": "1"}])
        assert err.message.startswith("events[0].seq: ")

    def test_events_not_a_list(self) -> None:
        err = refused(parse_events, "nope")
        assert err.message.startswith("events: ")
