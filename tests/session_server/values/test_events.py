"""Event and message value types: actions, roles, and the encoded shape."""

from __future__ import annotations

import typing

import msgspec
import pytest

from session_server.values.events import (
    ACTIONS,
    ROLES,
    Action,
    ContextMessage,
    Role,
    SessionEvent,
    ToolCall,
)

DESIGN_ACTIONS = (
    "user_message",
    "agent_message",
    "tool_call_request",
    "tool_result",
    "system_instruction",
    "compaction",
)


def test_every_action_of_the_design_exists() -> None:
    assert ACTIONS == DESIGN_ACTIONS
    assert typing.get_args(Action) == DESIGN_ACTIONS


def test_roles() -> None:
    assert ROLES == ("system", "user", "assistant", "tool")
    assert typing.get_args(Role) == ROLES


@pytest.mark.parametrize("action", DESIGN_ACTIONS)
def test_every_action_is_accepted_by_the_event_type(action: str) -> None:
    ev = msgspec.convert({"action": action, "content": "x"}, SessionEvent)
    assert ev.action == action


def test_unknown_action_is_refused_by_the_type() -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"action": "bogus"}, SessionEvent)


def test_tool_call_fields_and_default_arguments() -> None:
    call = ToolCall(id="c1", name="search")
    assert call.arguments == {}
    assert msgspec.to_builtins(call) == {"id": "c1", "name": "search", "arguments": {}}


def test_tool_call_defaults_are_not_shared() -> None:
    a, b = ToolCall("a", "f"), ToolCall("b", "f")
    a.arguments["x"] = 1
    assert b.arguments == {}


def test_context_message_encodes_only_the_keys_that_are_set() -> None:
    msg = ContextMessage(role="tool", content="42", tool_call_id="c1", name="calc")
    assert msgspec.to_builtins(msg) == {
        "role": "tool",
        "content": "42",
        "name": "calc",
        "tool_call_id": "c1",
    }


def test_context_message_always_encodes_role_and_content_even_when_empty() -> None:
    msg = ContextMessage(role="assistant", tool_calls=[ToolCall("c1", "f", {"a": 1})])
    assert msgspec.to_builtins(msg) == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "name": "f", "arguments": {"a": 1}}],
    }
    assert msgspec.to_builtins(ContextMessage(role="user")) == {"role": "user", "content": ""}


def test_context_message_flags_are_encoded_only_when_true() -> None:
    msg = ContextMessage(role="tool", content="x", tool_call_id="c", is_error=True)
    assert msgspec.to_builtins(msg)["is_error"] is True
    assert "compacted" not in msgspec.to_builtins(msg)


def test_session_event_always_encodes_action_and_content() -> None:
    """A user_message with empty content still says what it is (defaults are not dropped)."""
    ev = SessionEvent(id="e1", session_id="s1", seq=1, timestamp=5)
    assert msgspec.to_builtins(ev) == {
        "id": "e1",
        "session_id": "s1",
        "seq": 1,
        "timestamp": 5,
        "action": "user_message",
        "content": "",
    }


def test_session_event_omits_unset_optional_fields() -> None:
    ev = SessionEvent(
        id="e2",
        session_id="s1",
        seq=2,
        timestamp=6,
        action="tool_result",
        content="ok",
        tool_call_id="c1",
        tool_name="f",
        is_success=False,
    )
    assert msgspec.to_builtins(ev) == {
        "id": "e2",
        "session_id": "s1",
        "seq": 2,
        "timestamp": 6,
        "action": "tool_result",
        "content": "ok",
        "tool_call_id": "c1",
        "tool_name": "f",
        "is_success": False,
    }


def test_session_event_json_round_trip() -> None:
    ev = SessionEvent(
        id="e3",
        session_id="s1",
        seq=3,
        timestamp=7,
        action="tool_call_request",
        tool_calls=[ToolCall("c1", "f", {"q": "ü"})],
        model="m",
        metadata={"k": [1, 2]},
    )
    assert msgspec.json.decode(msgspec.json.encode(ev), type=SessionEvent) == ev


def test_server_assigned_fields_may_be_omitted() -> None:
    ev = msgspec.convert({"action": "agent_message", "content": "hi"}, SessionEvent)
    assert (ev.id, ev.session_id, ev.seq, ev.timestamp) == ("", "", 0, 0)


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"role": "user", "content": "x", "bogus": 1}, ContextMessage)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"action": "user_message", "bogus": 1}, SessionEvent)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"id": "c", "name": "f", "type": "function"}, ToolCall)


def test_tool_call_is_frozen() -> None:
    call = ToolCall("c1", "f")
    with pytest.raises(AttributeError):
        call.id = "c2"  # type: ignore[misc]
