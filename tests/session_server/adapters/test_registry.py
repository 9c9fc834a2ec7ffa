from __future__ import annotations

from typing import Any

import pytest

from session_server import adapters
from session_server.adapters import anthropic, openai_chat, openai_responses, workers_ai
from session_server.adapters.base import ModelFormatAdapter
from session_server.values.errors import InvalidParamsError, RenderError
from session_server.values.events import ContextMessage, ToolCall


def test_all_four_adapters_are_registered() -> None:
    assert adapters.names() == ["anthropic", "openai-chat", "openai-responses", "workers-ai"]
    assert adapters.get("workers-ai") is workers_ai.adapter
    assert adapters.get("openai-chat") is openai_chat.adapter
    assert adapters.get("openai-responses") is openai_responses.adapter
    assert adapters.get("anthropic") is anthropic.adapter
    for name in adapters.names():
        adapter = adapters.get(name)
        assert isinstance(adapter, ModelFormatAdapter)
        assert adapter.name == name


def test_unknown_adapter_is_a_clear_invalid_params_error() -> None:
    with pytest.raises(InvalidParamsError) as info:
        adapters.get("gemini")
    assert info.value.message == (
        "adapter: unknown adapter 'gemini'; known adapters: "
        "anthropic, openai-chat, openai-responses, workers-ai"
    )
    with pytest.raises(InvalidParamsError, match="unknown adapter 'gemini'"):
        adapters.render_context("gemini", [], [])


def test_render_context_takes_messages_and_json_objects_alike() -> None:
    as_structs = [
        ContextMessage(role="user", content="hi"),
        ContextMessage(role="assistant", tool_calls=[ToolCall(id="c1", name="t")]),
        ContextMessage(role="tool", content="r", tool_call_id="c1"),
    ]
    as_json: list[dict[str, Any]] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "tool_calls": [{"id": "c1", "name": "t", "arguments": {}}]},
        {"role": "tool", "content": "r", "tool_call_id": "c1"},
    ]
    for name in adapters.names():
        expected = adapters.get(name).to_model_messages(["S"], as_structs)
        assert adapters.render_context(name, ["S"], as_structs) == expected
        assert adapters.render_context(name, ["S"], as_json) == expected
    assert adapters.render_context(
        "anthropic", None, as_json
    ) == anthropic.adapter.to_model_messages([], as_structs)


def test_render_context_names_invalid_input() -> None:
    with pytest.raises(InvalidParamsError, match=r"^messages\[1\]\.role"):
        adapters.render_context("openai-chat", [], [{"role": "user"}, {"role": "robot"}])
    with pytest.raises(InvalidParamsError, match=r"^messages\[0\]: must be an object"):
        adapters.render_context("openai-chat", [], ["hello"])  # type: ignore[list-item]
    with pytest.raises(InvalidParamsError, match=r"^system_instructions: must be a list"):
        adapters.render_context("openai-chat", "be nice", [])
    with pytest.raises(InvalidParamsError, match=r"^system_instructions\[1\]: must be a string"):
        adapters.render_context("openai-chat", ["a", 3], [])  # type: ignore[list-item]


def test_render_context_refusals_are_render_errors() -> None:
    with pytest.raises(RenderError, match=r"^messages\[0\]: tool result for call_id 'x'"):
        adapters.render_context("anthropic", [], [{"role": "tool", "tool_call_id": "x"}])
