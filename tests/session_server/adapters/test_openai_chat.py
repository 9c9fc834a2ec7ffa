from __future__ import annotations

import json

import pytest

from session_server.adapters.openai_chat import adapter
from session_server.values.errors import RenderError
from session_server.values.events import ContextMessage, ToolCall

PLACEHOLDER = "⟦removed: tool output for weather (call_id=c1); reason=context_compaction⟧"


def test_name() -> None:
    assert adapter.name == "openai-chat"


def test_system_instructions_become_one_leading_system_message() -> None:
    out = adapter.to_model_messages(["A.", "B."], [ContextMessage(role="user", content="hi")])
    assert out == {
        "messages": [
            {"role": "system", "content": "A.\n\nB."},
            {"role": "user", "content": "hi"},
        ]
    }


def test_no_instructions_no_system_message_and_in_context_system_kept_in_place() -> None:
    memory = "[MEMORY:EPISODIC]\n1) x\n\n[MEMORY:SEMANTIC]\n- y"
    out = adapter.to_model_messages(
        [],
        [ContextMessage(role="system", content=memory), ContextMessage(role="user", content="q")],
    )
    assert out["messages"] == [
        {"role": "system", "content": memory},
        {"role": "user", "content": "q"},
    ]


def test_tool_calls_results_errors_and_placeholders() -> None:
    messages = [
        ContextMessage(role="user", content="weather?"),
        ContextMessage(
            role="assistant",
            reasoning="secret chain of thought",
            tool_calls=[
                ToolCall(id="c1", name="weather", arguments={"city": "Zürich"}),
                ToolCall(id="c2", name="clock"),
            ],
        ),
        ContextMessage(
            role="tool", content=PLACEHOLDER, tool_call_id="c1", name="weather", compacted=True
        ),
        ContextMessage(role="tool", content="boom", tool_call_id="c2", is_error=True),
        ContextMessage(role="assistant", content="done", reasoning="more thoughts"),
    ]
    out = adapter.to_model_messages([], messages)["messages"]
    assert out == [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Zürich"}'},
                },
                {"id": "c2", "type": "function", "function": {"name": "clock", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": PLACEHOLDER},
        {"role": "tool", "tool_call_id": "c2", "content": "boom"},
        {"role": "assistant", "content": "done"},
    ]
    assert json.loads(out[1]["tool_calls"][0]["function"]["arguments"]) == {"city": "Zürich"}
    assert "thought" not in json.dumps(out)


def test_assistant_text_beside_tool_calls_and_names() -> None:
    out = adapter.to_model_messages(
        [],
        [
            ContextMessage(role="user", content="hi", name="alice"),
            ContextMessage(
                role="assistant", content="Let me look.", tool_calls=[ToolCall(id="c1", name="t")]
            ),
        ],
    )["messages"]
    assert out[0] == {"role": "user", "content": "hi", "name": "alice"}
    assert out[1]["content"] == "Let me look."
    assert out[1]["tool_calls"][0]["id"] == "c1"


def test_images_become_image_url_parts() -> None:
    data_url = "data:image/png;base64,AAAA"
    out = adapter.to_model_messages(
        [],
        [
            ContextMessage(role="user", content="look", images=["https://x/a.png", data_url]),
            ContextMessage(role="user", images=[data_url]),
        ],
    )["messages"]
    assert out == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "https://x/a.png"}},
                {"type": "image_url", "image_url": {"url": data_url}},
            ],
        },
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": data_url}}]},
    ]


@pytest.mark.parametrize(
    "message",
    [
        ContextMessage(role="assistant", content="x", images=["https://x/a.png"]),
        ContextMessage(role="system", content="x", images=["https://x/a.png"]),
    ],
)
def test_images_outside_user_messages_are_refused(message: ContextMessage) -> None:
    with pytest.raises(RenderError, match=r"^messages\[0\]\.images: openai-chat cannot attach"):
        adapter.to_model_messages([], [message])


def test_tool_images_are_refused() -> None:
    messages = [
        ContextMessage(role="assistant", tool_calls=[ToolCall(id="c1", name="shot")]),
        ContextMessage(role="tool", tool_call_id="c1", images=["https://x/a.png"]),
    ]
    with pytest.raises(RenderError, match=r"^messages\[1\]\.images"):
        adapter.to_model_messages([], messages)


def test_orphan_result_is_refused() -> None:
    messages = [
        ContextMessage(role="user", content="a"),
        ContextMessage(role="assistant", content="b"),
        ContextMessage(role="user", content="c"),
        ContextMessage(role="tool", content="r", tool_call_id="x"),
    ]
    with pytest.raises(RenderError) as info:
        adapter.to_model_messages([], messages)
    assert info.value.message == (
        "messages[3]: tool result for call_id 'x' has no preceding tool call"
    )


def test_the_input_is_not_modified() -> None:
    call = ToolCall(id="c1", name="t", arguments={"a": [1]})
    messages = [ContextMessage(role="assistant", tool_calls=[call])]
    adapter.to_model_messages([], messages)
    assert messages == [ContextMessage(role="assistant", tool_calls=[call])]
    assert call.arguments == {"a": [1]}
