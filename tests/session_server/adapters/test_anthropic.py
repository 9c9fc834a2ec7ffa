from __future__ import annotations

import pytest

from session_server.adapters.anthropic import LEADING_USER_TEXT, adapter
from session_server.values.errors import RenderError
from session_server.values.events import ContextMessage, ToolCall

PLACEHOLDER = "⟦removed: tool output for weather (call_id=c1); reason=context_compaction⟧"


def _text(text: str) -> dict[str, str]:
    return {"type": "text", "text": text}


def test_name() -> None:
    assert adapter.name == "anthropic"


def test_system_top_level_and_in_context_system_messages_appended() -> None:
    memory = "[MEMORY:EPISODIC]\n1) x\n\n[MEMORY:SEMANTIC]\n- y"
    messages = [
        ContextMessage(role="system", content=memory),
        ContextMessage(role="user", content="hi"),
        ContextMessage(role="system", content="Compacted 4 events."),
        ContextMessage(role="assistant", content="hello", reasoning="hidden"),
    ]
    assert adapter.to_model_messages(["Be kind."], messages) == {
        "system": f"Be kind.\n\n{memory}\n\nCompacted 4 events.",
        "messages": [
            {"role": "user", "content": [_text("hi")]},
            {"role": "assistant", "content": [_text("hello")]},
        ],
    }


def test_system_omitted_when_empty() -> None:
    out = adapter.to_model_messages([""], [ContextMessage(role="user", content="hi")])
    assert out == {"messages": [{"role": "user", "content": [_text("hi")]}]}


def test_tool_use_and_grouped_tool_results_with_error_flag() -> None:
    messages = [
        ContextMessage(role="user", content="weather?"),
        ContextMessage(
            role="assistant",
            content="Checking.",
            tool_calls=[
                ToolCall(id="c1", name="weather", arguments={"city": "Paris"}),
                ToolCall(id="c2", name="weather", arguments={"city": "Rome"}),
            ],
        ),
        ContextMessage(role="tool", content=PLACEHOLDER, tool_call_id="c1", compacted=True),
        ContextMessage(role="tool", content="timeout", tool_call_id="c2", is_error=True),
        ContextMessage(role="user", content="and?"),
    ]
    assert adapter.to_model_messages([], messages)["messages"] == [
        {"role": "user", "content": [_text("weather?")]},
        {
            "role": "assistant",
            "content": [
                _text("Checking."),
                {"type": "tool_use", "id": "c1", "name": "weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "c2", "name": "weather", "input": {"city": "Rome"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": PLACEHOLDER},
                {
                    "type": "tool_result",
                    "tool_use_id": "c2",
                    "content": "timeout",
                    "is_error": True,
                },
                _text("and?"),
            ],
        },
    ]


def test_adjacent_same_role_messages_merge_and_empty_ones_drop() -> None:
    messages = [
        ContextMessage(role="user", content="one"),
        ContextMessage(role="user", content=""),
        ContextMessage(role="user", content="two"),
        ContextMessage(role="assistant", content="a"),
        ContextMessage(role="assistant", content="b"),
    ]
    assert adapter.to_model_messages([], messages)["messages"] == [
        {"role": "user", "content": [_text("one"), _text("two")]},
        {"role": "assistant", "content": [_text("a"), _text("b")]},
    ]


def test_history_starting_with_assistant_gets_a_leading_user_message() -> None:
    out = adapter.to_model_messages(
        [], [ContextMessage(role="assistant", content="Welcome!"), ContextMessage(role="user")]
    )
    assert out["messages"] == [
        {"role": "user", "content": [_text(LEADING_USER_TEXT)]},
        {"role": "assistant", "content": [_text("Welcome!")]},
    ]


def test_images_data_and_http_urls() -> None:
    messages = [
        ContextMessage(
            role="user",
            content="see",
            images=["data:image/png;base64,iVBO", "https://x/cat.jpg"],
        ),
        ContextMessage(role="assistant", tool_calls=[ToolCall(id="s", name="shot")]),
        ContextMessage(role="tool", content="shot", tool_call_id="s", images=["https://x/s.png"]),
    ]
    out = adapter.to_model_messages([], messages)["messages"]
    assert out[0]["content"] == [
        _text("see"),
        {
            "type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"},
        },
        {"type": "image", "source": {"type": "url", "url": "https://x/cat.jpg"}},
    ]
    assert out[2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "s",
            "content": [
                _text("shot"),
                {"type": "image", "source": {"type": "url", "url": "https://x/s.png"}},
            ],
        }
    ]


@pytest.mark.parametrize(
    "url",
    ["data:image/bmp;base64,AAAA", "data:image/png,rawbytes", "file:///tmp/a.png", "ftp://x/a"],
)
def test_images_the_api_cannot_take_are_refused(url: str) -> None:
    with pytest.raises(RenderError, match=r"^messages\[0\]\.images\[0\]: anthropic accepts"):
        adapter.to_model_messages([], [ContextMessage(role="user", images=[url])])


def test_assistant_images_are_refused() -> None:
    with pytest.raises(RenderError, match=r"^messages\[1\]\.images: anthropic"):
        adapter.to_model_messages(
            [],
            [
                ContextMessage(role="user", content="q"),
                ContextMessage(role="assistant", content="x", images=["https://x/a.png"]),
            ],
        )


def test_orphan_result_is_refused() -> None:
    with pytest.raises(RenderError) as info:
        adapter.to_model_messages([], [ContextMessage(role="tool", content="r", tool_call_id="zz")])
    assert info.value.message == (
        "messages[0]: tool result for call_id 'zz' has no preceding tool call"
    )


def test_pending_call_at_the_end_is_allowed() -> None:
    out = adapter.to_model_messages(
        [],
        [
            ContextMessage(role="user", content="q"),
            ContextMessage(role="assistant", tool_calls=[ToolCall(id="c1", name="t")]),
        ],
    )
    assert out["messages"][-1] == {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "c1", "name": "t", "input": {}}],
    }
