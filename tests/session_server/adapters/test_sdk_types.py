"""Every adapter's output validates against the providers' own SDK request types.

Validation uses pydantic ``TypeAdapter``s over the SDK TypedDicts with ``extra="forbid"``
and ``strict=True`` (a key the type does not declare, or a value of the wrong type, is an
error). The SDK types declare many fields as ``Iterable[...]``, which pydantic validates
lazily; :func:`validate` drains every such iterator so nested items are checked too (the
negative tests prove that a wrong nested shape is caught).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import pairwise
from typing import Any

import pytest
from anthropic.types import MessageParam
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types.chat import ChatCompletionMessageParam
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from openai.types.responses import ResponseInputItemParam
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
from pydantic import ConfigDict, TypeAdapter, ValidationError

from session_server.adapters import anthropic as anthropic_adapter
from session_server.adapters import openai_chat, openai_responses
from session_server.values.events import ContextMessage, ToolCall

STRICT = ConfigDict(extra="forbid", strict=True)
CHAT_MESSAGES: TypeAdapter[Any] = TypeAdapter(list[ChatCompletionMessageParam], config=STRICT)
RESPONSES_INPUT: TypeAdapter[Any] = TypeAdapter(list[ResponseInputItemParam], config=STRICT)
ANTHROPIC_MESSAGES: TypeAdapter[Any] = TypeAdapter(list[MessageParam], config=STRICT)
# Whole requests (a TypedDict cannot take a config directly: wrap it in a list).
CHAT_REQUEST: TypeAdapter[Any] = TypeAdapter(
    list[CompletionCreateParamsNonStreaming], config=STRICT
)
RESPONSES_REQUEST: TypeAdapter[Any] = TypeAdapter(
    list[ResponseCreateParamsNonStreaming], config=STRICT
)
ANTHROPIC_REQUEST: TypeAdapter[Any] = TypeAdapter(
    list[MessageCreateParamsNonStreaming], config=STRICT
)

PLACEHOLDER = "⟦removed: tool output for weather (call_id=c1); reason=context_compaction⟧"
MEMORY_BLOCK = (
    "[MEMORY:EPISODIC]\n1) The user asked for the weather in Paris; it was sunny.\n\n"
    "[MEMORY:SEMANTIC]\n- The user lives in Paris."
)
PNG_DATA_URL = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNk"
    "YAAAAAYAAjCB0C8AAAAASUVORK5CYII="
)
INSTRUCTIONS = ["You are a helpful assistant.", "Answer briefly."]


def _call(call_id: str, city: str) -> ToolCall:
    return ToolCall(id=call_id, name="weather", arguments={"city": city})


CONTEXTS: dict[str, tuple[list[str], list[ContextMessage]]] = {
    "plain_chat": (
        INSTRUCTIONS,
        [
            ContextMessage(role="user", content="Hi"),
            ContextMessage(role="assistant", content="Hello!", reasoning="greet back"),
            ContextMessage(role="user", content="How are you?"),
        ],
    ),
    "multi_tool_turn": (
        INSTRUCTIONS,
        [
            ContextMessage(role="user", content="Weather in Paris and Rome?"),
            ContextMessage(
                role="assistant",
                content="Checking both.",
                tool_calls=[_call("c1", "Paris"), _call("c2", "Rome")],
            ),
            ContextMessage(role="tool", content="18C", tool_call_id="c1", name="weather"),
            ContextMessage(role="tool", content="21C", tool_call_id="c2", name="weather"),
            ContextMessage(role="assistant", content="Paris 18C, Rome 21C."),
        ],
    ),
    "error_result": (
        INSTRUCTIONS,
        [
            ContextMessage(role="user", content="Weather in Oslo?"),
            ContextMessage(role="assistant", tool_calls=[_call("c1", "Oslo")]),
            ContextMessage(
                role="tool", content="timeout", tool_call_id="c1", name="weather", is_error=True
            ),
            ContextMessage(role="assistant", content="The weather service timed out."),
        ],
    ),
    "compacted_history": (
        INSTRUCTIONS,
        [
            ContextMessage(role="user", content="Weather?"),
            ContextMessage(role="assistant", tool_calls=[_call("c1", "Paris")]),
            ContextMessage(
                role="tool",
                content=PLACEHOLDER,
                tool_call_id="c1",
                name="weather",
                compacted=True,
            ),
            ContextMessage(role="assistant", content="It was sunny."),
            ContextMessage(role="user", content="And tomorrow?"),
        ],
    ),
    "memory_block": (
        INSTRUCTIONS,
        [
            ContextMessage(role="system", content=MEMORY_BLOCK),
            ContextMessage(role="user", content="What do you remember?"),
            ContextMessage(role="assistant", content="That you live in Paris."),
        ],
    ),
    "images": (
        [],
        [
            ContextMessage(
                role="user",
                content="What are these?",
                images=["https://example.com/cat.png", PNG_DATA_URL],
            ),
            ContextMessage(role="assistant", content="A cat and a pixel."),
            ContextMessage(role="user", images=[PNG_DATA_URL]),
        ],
    ),
    "pending_call": (
        INSTRUCTIONS,
        [
            ContextMessage(role="user", content="Weather in Paris?"),
            ContextMessage(role="assistant", tool_calls=[_call("c1", "Paris")]),
        ],
    ),
}


def _drain(value: Any) -> Any:
    """The validated value with every lazy (iterable) validator consumed, recursively."""
    if isinstance(value, dict):
        return {k: _drain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_drain(v) for v in value]
    if isinstance(value, Iterator):
        return [_drain(v) for v in value]
    return value


def validate(adapter: TypeAdapter[Any], payload: Any) -> Any:
    """Validate ``payload`` strictly, nested iterables included; return the plain result."""
    return _drain(adapter.validate_python(payload))


def _render_all(
    system: Sequence[str], messages: Sequence[ContextMessage]
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    return (
        openai_chat.adapter.to_model_messages(system, messages),
        openai_responses.adapter.to_model_messages(system, messages),
        anthropic_adapter.adapter.to_model_messages(system, messages),
    )


def _check_all(system: Sequence[str], messages: Sequence[ContextMessage]) -> None:
    chat, responses, anthropic = _render_all(system, messages)
    assert validate(CHAT_MESSAGES, chat["messages"]) == chat["messages"]
    assert validate(CHAT_REQUEST, [{"model": "m", **chat}]) == [{"model": "m", **chat}]
    assert validate(RESPONSES_INPUT, responses["input"]) == responses["input"]
    assert validate(RESPONSES_REQUEST, [{"model": "m", **responses}]) == [
        {"model": "m", **responses}
    ]
    assert validate(ANTHROPIC_MESSAGES, anthropic["messages"]) == anthropic["messages"]
    request = {"model": "m", "max_tokens": 16, **anthropic}
    assert validate(ANTHROPIC_REQUEST, [request]) == [request]


@pytest.mark.parametrize("name", sorted(CONTEXTS))
def test_every_adapter_output_validates_against_the_sdk_types(name: str) -> None:
    system, messages = CONTEXTS[name]
    _check_all(system, messages)


def test_tool_results_with_images_validate_for_responses_and_anthropic() -> None:
    messages = [
        ContextMessage(role="user", content="Screenshot please"),
        ContextMessage(role="assistant", tool_calls=[ToolCall(id="s1", name="screenshot")]),
        ContextMessage(
            role="tool", content="here", tool_call_id="s1", images=[PNG_DATA_URL], is_error=False
        ),
    ]
    responses = openai_responses.adapter.to_model_messages([], messages)
    anthropic = anthropic_adapter.adapter.to_model_messages([], messages)
    assert validate(RESPONSES_INPUT, responses["input"]) == responses["input"]
    assert validate(ANTHROPIC_MESSAGES, anthropic["messages"]) == anthropic["messages"]


# Negative tests: a deliberately wrong payload fails validation.

WRONG_CHAT = [
    pytest.param([{"role": "tool", "content": "18C"}], id="tool-without-tool_call_id"),
    pytest.param(
        [{"role": "tool", "content": "18C", "tool_call_id": "c1", "name": "weather"}],
        id="tool-with-undeclared-name",
    ),
    pytest.param(
        [
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "w", "arguments": {}}}
                ],
            }
        ],
        id="nested-arguments-not-a-string",
    ),
    pytest.param(
        [{"role": "user", "content": [{"type": "image_url", "image_url": "https://x/y.png"}]}],
        id="nested-image_url-not-an-object",
    ),
]


@pytest.mark.parametrize("payload", WRONG_CHAT)
def test_wrong_chat_payload_fails(payload: list[dict[str, Any]]) -> None:
    with pytest.raises(ValidationError):
        validate(CHAT_MESSAGES, payload)


WRONG_RESPONSES = [
    pytest.param(
        [{"type": "function_call_output", "tool_call_id": "c1", "output": "18C"}],
        id="output-with-chat-key",
    ),
    pytest.param(
        [{"type": "function_call_output", "call_id": "c1", "output": 18}],
        id="output-not-text",
    ),
    pytest.param(
        [{"type": "function_call", "call_id": "c1", "name": "w", "arguments": {"a": 1}}],
        id="arguments-not-a-string",
    ),
    pytest.param(
        [{"type": "message", "role": "user", "content": [{"type": "input_image", "url": "u"}]}],
        id="nested-image-part-wrong-key",
    ),
]


@pytest.mark.parametrize("payload", WRONG_RESPONSES)
def test_wrong_responses_payload_fails(payload: list[dict[str, Any]]) -> None:
    with pytest.raises(ValidationError):
        validate(RESPONSES_INPUT, payload)


WRONG_ANTHROPIC = [
    pytest.param([{"role": "tool", "content": "18C"}], id="role-tool"),
    pytest.param(
        [{"role": "user", "content": [{"type": "tool_result", "tool_call_id": "c1"}]}],
        id="tool_result-with-openai-key",
    ),
    pytest.param(
        [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "c1", "name": "w", "input": "{}"}],
            }
        ],
        id="tool_use-input-not-an-object",
    ),
]


@pytest.mark.parametrize("payload", WRONG_ANTHROPIC)
def test_wrong_anthropic_payload_fails(payload: list[dict[str, Any]]) -> None:
    with pytest.raises(ValidationError):
        validate(ANTHROPIC_MESSAGES, payload)


def test_wrong_top_level_field_fails() -> None:
    with pytest.raises(ValidationError):
        validate(ANTHROPIC_REQUEST, [{"model": "m", "max_tokens": 1, "messages": [], "sys": "x"}])
    with pytest.raises(ValidationError):
        validate(RESPONSES_REQUEST, [{"model": "m", "input": [], "instructions": ["a"]}])


# Property: any well-formed context renders to valid payloads for every provider.

_text = st.text(alphabet="abc xyz⟦⟧\n", max_size=12)


@st.composite
def _contexts(draw: st.DrawFn) -> tuple[list[str], list[ContextMessage]]:
    system = draw(st.lists(st.text(alphabet="abc ", min_size=1, max_size=8), max_size=2))
    messages: list[ContextMessage] = []
    counter = 0
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["user", "assistant", "system", "tools"]))
        if kind == "user":
            images = draw(
                st.lists(st.sampled_from([PNG_DATA_URL, "https://e.x/a.jpg"]), max_size=2)
            )
            messages.append(ContextMessage(role="user", content=draw(_text), images=images or None))
        elif kind == "assistant":
            messages.append(ContextMessage(role="assistant", content=draw(_text)))
        elif kind == "system":
            messages.append(ContextMessage(role="system", content=draw(_text)))
        else:
            calls = []
            for _ in range(draw(st.integers(1, 3))):
                counter += 1
                calls.append(ToolCall(id=f"c{counter}", name="t", arguments={"n": counter}))
            messages.append(ContextMessage(role="assistant", content=draw(_text), tool_calls=calls))
            for call in draw(st.permutations(calls)):
                messages.append(
                    ContextMessage(
                        role="tool",
                        content=draw(_text),
                        tool_call_id=call.id,
                        is_error=draw(st.booleans()),
                        compacted=draw(st.booleans()),
                    )
                )
    return system, messages


@settings(max_examples=60, deadline=None)
@given(_contexts())
def test_any_well_formed_context_validates_for_every_provider(
    context: tuple[list[str], list[ContextMessage]],
) -> None:
    system, messages = context
    _check_all(system, messages)
    anthropic = anthropic_adapter.adapter.to_model_messages(system, messages)["messages"]
    roles = [m["role"] for m in anthropic]
    assert all(a != b for a, b in pairwise(roles))
    assert not roles or roles[0] == "user"
