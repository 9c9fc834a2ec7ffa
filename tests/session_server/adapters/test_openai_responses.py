from __future__ import annotations

import pytest

from session_server.adapters.openai_responses import adapter
from session_server.values.errors import RenderError
from session_server.values.events import ContextMessage, ToolCall

PLACEHOLDER = "⟦removed: tool output for weather (call_id=c1); reason=context_compaction⟧"


def test_name() -> None:
    assert adapter.name == "openai-responses"


def test_instructions_top_level_and_omitted_when_none() -> None:
    msgs = [ContextMessage(role="user", content="hi")]
    assert adapter.to_model_messages(["A.", "B."], msgs) == {
        "instructions": "A.\n\nB.",
        "input": [{"type": "message", "role": "user", "content": "hi"}],
    }
    assert adapter.to_model_messages([], msgs) == {
        "input": [{"type": "message", "role": "user", "content": "hi"}]
    }


def test_function_call_and_output_items_pair_by_call_id() -> None:
    messages = [
        ContextMessage(role="system", content="[MEMORY:EPISODIC]\n1) x"),
        ContextMessage(role="user", content="weather?"),
        ContextMessage(
            role="assistant",
            content="Checking.",
            reasoning="hidden",
            tool_calls=[
                ToolCall(id="c1", name="weather", arguments={"city": "Paris"}),
                ToolCall(id="c2", name="weather", arguments={"city": "Rome"}),
            ],
        ),
        ContextMessage(role="tool", content="21C", tool_call_id="c2", name="weather"),
        ContextMessage(role="tool", content=PLACEHOLDER, tool_call_id="c1", compacted=True),
        ContextMessage(role="assistant", content="ok"),
        ContextMessage(role="assistant", tool_calls=[ToolCall(id="c3", name="clock")]),
        ContextMessage(role="tool", content="error: no clock", tool_call_id="c3", is_error=True),
    ]
    assert adapter.to_model_messages([], messages)["input"] == [
        {"type": "message", "role": "system", "content": "[MEMORY:EPISODIC]\n1) x"},
        {"type": "message", "role": "user", "content": "weather?"},
        {"type": "message", "role": "assistant", "content": "Checking."},
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "weather",
            "arguments": '{"city":"Paris"}',
        },
        {
            "type": "function_call",
            "call_id": "c2",
            "name": "weather",
            "arguments": '{"city":"Rome"}',
        },
        {"type": "function_call_output", "call_id": "c2", "output": "21C"},
        {"type": "function_call_output", "call_id": "c1", "output": PLACEHOLDER},
        {"type": "message", "role": "assistant", "content": "ok"},
        {"type": "function_call", "call_id": "c3", "name": "clock", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c3", "output": "error: no clock"},
    ]


def test_images_on_user_messages_and_tool_outputs() -> None:
    url = "data:image/jpeg;base64,/9j/"
    messages = [
        ContextMessage(role="user", content="see", images=[url]),
        ContextMessage(role="assistant", tool_calls=[ToolCall(id="s", name="shot")]),
        ContextMessage(role="tool", tool_call_id="s", images=["https://x/s.png"]),
    ]
    assert adapter.to_model_messages([], messages)["input"] == [
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "see"},
                {"type": "input_image", "image_url": url, "detail": "auto"},
            ],
        },
        {"type": "function_call", "call_id": "s", "name": "shot", "arguments": "{}"},
        {
            "type": "function_call_output",
            "call_id": "s",
            "output": [{"type": "input_image", "image_url": "https://x/s.png", "detail": "auto"}],
        },
    ]


def test_assistant_images_are_refused() -> None:
    with pytest.raises(RenderError, match=r"^messages\[0\]\.images: openai-responses"):
        adapter.to_model_messages(
            [], [ContextMessage(role="assistant", content="x", images=["https://x/a.png"])]
        )


def test_missing_result_followed_by_a_message_is_refused() -> None:
    messages = [
        ContextMessage(role="user", content="q"),
        ContextMessage(role="assistant", tool_calls=[ToolCall(id="c1", name="t")]),
        ContextMessage(role="user", content="hello?"),
    ]
    with pytest.raises(RenderError, match=r"^messages\[1\]: tool call 'c1' has no result"):
        adapter.to_model_messages([], messages)


def test_missing_result_in_the_last_assistant_message_is_allowed() -> None:
    messages = [
        ContextMessage(role="user", content="q"),
        ContextMessage(role="assistant", tool_calls=[ToolCall(id="c1", name="t")]),
    ]
    out = adapter.to_model_messages([], messages)["input"]
    assert out[-1] == {"type": "function_call", "call_id": "c1", "name": "t", "arguments": "{}"}
