"""``from_response`` of every adapter: provider output in, messages out, and back.

The property tests check, per format, that rendering what was ingested gives back the
provider's own message fields (the Responses items, the chat message's request fields, the
Anthropic content blocks, the Workers AI text and calls).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session_server.adapters import anthropic, openai_chat, openai_responses, workers_ai
from session_server.adapters.ingest import PROVIDER_FORMAT, PROVIDER_ITEMS, parse_arguments
from session_server.values.codec import encode_json
from session_server.values.errors import InvalidParamsError
from session_server.values.events import ContextMessage, ToolCall
from session_server.values.validation import parse_messages

TEXT = st.text(max_size=20)
IDENT = st.text("abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=12)
JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(IDENT, inner, max_size=3),
    max_leaves=6,
)
ARGS_OBJECT = st.dictionaries(IDENT, JSON_VALUE, max_size=3)
# Arguments as models send them: compact or spaced JSON objects, other JSON, broken text.
ARGUMENTS = st.one_of(
    ARGS_OBJECT.map(encode_json),
    ARGS_OBJECT.map(json.dumps),
    JSON_VALUE.map(json.dumps),
    TEXT,
)


def persistable(messages: list[ContextMessage]) -> None:
    """What ``turn.persist`` validates (the wire form) accepts every ingested message."""
    parse_messages(msgspec.to_builtins(messages))


# ------------------------------------------------------------------ openai responses


def _call_ids(draw: st.DrawFn, n: int) -> list[str]:
    return [f"call_{k}_{draw(IDENT)}" for k in range(n)]


@st.composite
def responses_turn(draw: st.DrawFn) -> list[dict[str, Any]]:
    """The output items of one model turn (what a Response's ``output`` holds)."""
    items: list[dict[str, Any]] = []
    if draw(st.booleans()):
        reasoning: dict[str, Any] = {
            "type": "reasoning",
            "id": f"rs_{draw(IDENT)}",
            "summary": [
                {"type": "summary_text", "text": t} for t in draw(st.lists(TEXT, max_size=2))
            ],
        }
        if draw(st.booleans()):
            reasoning["encrypted_content"] = draw(TEXT)
        items.append(reasoning)
    if draw(st.booleans()):
        items.append(
            {
                "type": "web_search_call",
                "id": f"ws_{draw(IDENT)}",
                "status": "completed",
                "action": {"type": "search", "query": draw(TEXT)},
            }
        )
    if draw(st.booleans()):
        items.append(
            {
                "type": "message",
                "id": f"msg_{draw(IDENT)}",
                "role": "assistant",
                "status": "completed",
                "content": [
                    {"type": "output_text", "text": t, "annotations": []}
                    for t in draw(st.lists(TEXT, min_size=1, max_size=2))
                ],
            }
        )
    for call_id in _call_ids(draw, draw(st.integers(0, 3))):
        items.append(
            {
                "type": "function_call",
                "id": f"fc_{draw(IDENT)}",
                "call_id": call_id,
                "name": draw(IDENT),
                "arguments": draw(ARGUMENTS),
                "status": "completed",
            }
        )
    if draw(st.booleans()):
        items.append({"type": "some_future_item", "payload": draw(JSON_VALUE)})
    return items


@st.composite
def responses_history(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Items as the OpenAI Agents SDK stores them: inputs, turns and tool outputs."""
    items: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            items.append({"role": "user", "content": draw(TEXT)})
        else:
            items.append(
                {
                    "type": "message",
                    "role": draw(st.sampled_from(["user", "system", "developer"])),
                    "content": [
                        {"type": "input_text", "text": t} for t in draw(st.lists(TEXT, max_size=2))
                    ],
                }
            )
        turn = draw(responses_turn())
        items.extend(turn)
        for item in turn:
            if item["type"] == "function_call":
                output: Any = draw(st.one_of(TEXT, st.just([{"type": "input_text", "text": "x"}])))
                items.append(
                    {"type": "function_call_output", "call_id": item["call_id"], "output": output}
                )
    return items


@settings(max_examples=150, deadline=None)
@given(responses_history())
def test_responses_items_round_trip_exactly(items: list[dict[str, Any]]) -> None:
    messages = openai_responses.from_items(items)
    persistable(messages)
    assert openai_responses.to_input_items(messages) == items


@settings(max_examples=150, deadline=None)
@given(responses_turn())
def test_responses_output_renders_back_as_its_items(output: list[dict[str, Any]]) -> None:
    messages = openai_responses.from_response({"object": "response", "output": output})
    persistable(messages)
    assert len(messages) <= 1  # one model turn is one assistant message
    rendered = openai_responses.adapter.to_model_messages([], messages)
    assert rendered["input"] == output


def test_responses_fields_of_a_turn() -> None:
    output = [
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "think"}],
         "encrypted_content": "gAAA"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "weather",
         "arguments": '{"city": "Paris"}', "status": "completed"},
        {"type": "function_call", "id": "fc_2", "call_id": "c2", "name": "weather",
         "arguments": "not json"},
    ]  # fmt: skip
    [msg] = openai_responses.from_response(output)
    assert msg.role == "assistant" and msg.content == "Checking." and msg.reasoning == "think"
    assert msg.tool_calls == [
        ToolCall(id="c1", name="weather", arguments={"city": "Paris"}),
        ToolCall(id="c2", name="weather", arguments="not json"),
    ]
    assert msg.metadata == {PROVIDER_FORMAT: "openai-responses", PROVIDER_ITEMS: output}
    # Other formats get the fields: no reasoning, no hosted call, no item ids.
    chat = openai_chat.adapter.to_model_messages([], [msg])["messages"]
    assert chat == [
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": '{"city":"Paris"}'}},
                {"id": "c2", "type": "function", "function": {"name": "weather", "arguments": "not json"}},
            ],
        }
    ]  # fmt: skip
    blocks = anthropic.adapter.to_model_messages([], [msg])["messages"][-1]["content"]
    assert [b["type"] for b in blocks] == ["text", "tool_use", "tool_use"]


def test_responses_hosted_only_turn_is_left_out_elsewhere() -> None:
    msgs = [
        ContextMessage(role="user", content="search"),
        *openai_responses.from_response(
            [{"type": "web_search_call", "id": "ws_1", "status": "completed"}]
        ),
        ContextMessage(role="assistant", content="found"),
    ]
    assert openai_chat.adapter.to_model_messages([], msgs)["messages"] == [
        {"role": "user", "content": "search"},
        {"role": "assistant", "content": "found"},
    ]
    assert len(anthropic.adapter.to_model_messages([], msgs)["messages"]) == 2
    assert (
        openai_responses.adapter.to_model_messages([], msgs)["input"][1]["type"]
        == "web_search_call"
    )


def test_responses_outputs_name_their_tool_and_compaction_wins() -> None:
    items = [
        {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        {"type": "computer_call_output", "call_id": "c2",
         "output": {"type": "computer_screenshot", "image_url": "https://x/y.png"}},
    ]  # fmt: skip
    _, result, shot = openai_responses.from_items(items)
    assert (result.role, result.name, result.content) == ("tool", "weather", "sunny")
    assert result.metadata is None  # rendering the fields gives the item back: no copy
    assert shot.images == ["https://x/y.png"] and shot.metadata is not None
    compacted = msgspec.structs.replace(shot, content="⟦removed⟧", images=None, compacted=True)
    assert openai_responses.to_input_items([compacted]) == [
        {"type": "function_call_output", "call_id": "c2", "output": "⟦removed⟧"}
    ]


def test_responses_from_real_sdk_objects() -> None:
    from openai.types.responses import Response

    response = Response.model_validate(
        {
            "id": "resp_1", "object": "response", "created_at": 0, "model": "m",
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            "output": [
                {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "hm"}]},
                {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{}"},
            ],
        }
    )  # fmt: skip
    [msg] = openai_responses.from_response(response)
    assert msg.reasoning == "hm" and msg.tool_calls == [ToolCall(id="c1", name="f")]
    assert openai_responses.to_input_items([msg]) == [
        o.model_dump(mode="json", exclude_unset=True) for o in response.output
    ]
    [same] = openai_responses.from_response(response.output)
    assert same == msg


def test_responses_refuses_non_objects() -> None:
    with pytest.raises(InvalidParamsError, match=r"items\[1\]"):
        openai_responses.from_items([{"role": "user", "content": "x"}, 3])
    with pytest.raises(InvalidParamsError, match="payload"):
        openai_responses.from_response("text")


# ------------------------------------------------------------------------ openai chat


@st.composite
def chat_message(draw: st.DrawFn) -> dict[str, Any]:
    calls = [
        {
            "id": call_id,
            "type": "function",
            "function": {"name": draw(IDENT), "arguments": draw(ARGUMENTS)},
        }
        for call_id in _call_ids(draw, draw(st.integers(0, 3)))
    ]
    message: dict[str, Any] = {
        "role": "assistant",
        "content": draw(st.none() | TEXT) if calls else draw(TEXT),
        "refusal": draw(st.none() | TEXT),
        "annotations": [],
        "audio": draw(
            st.none()
            | st.just({"id": "audio_1", "data": "AAA", "expires_at": 1, "transcript": "t"})
        ),
        "function_call": None,
        "tool_calls": calls or None,
    }
    if draw(st.booleans()):
        message["reasoning_content"] = draw(TEXT)
    return message


@settings(max_examples=200, deadline=None)
@given(chat_message(), st.sampled_from(["message", "choice", "completion"]))
def test_chat_renders_back_the_message_fields(message: dict[str, Any], shape: str) -> None:
    payload: dict[str, Any] = message
    if shape != "message":
        payload = {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
    if shape == "completion":
        payload = {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [payload],
        }
    messages = openai_chat.from_response(payload)
    persistable(messages)
    rendered = openai_chat.adapter.to_model_messages([], messages)["messages"]
    assert rendered == [openai_chat.request_fields(message)]
    assert messages[0].reasoning == (message.get("reasoning_content") or None)


def test_chat_plain_answer_keeps_no_copy_and_reads_sdk_objects() -> None:
    from openai.types.chat import ChatCompletion

    completion = ChatCompletion.model_validate(
        {
            "id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": None, "refusal": None,
                "tool_calls": [{"id": "c1", "type": "function",
                                "function": {"name": "f", "arguments": '{"a":1}'}}]}}],
        }
    )  # fmt: skip
    for payload in (completion, completion.choices[0], completion.choices[0].message):
        [msg] = openai_chat.from_response(payload)
        assert msg == ContextMessage(
            role="assistant", tool_calls=[ToolCall(id="c1", name="f", arguments={"a": 1})]
        )
    # What the issue reported refused: a raw model_dump() with null content and extra keys.
    [msg] = openai_chat.from_response(completion.choices[0].message.model_dump())
    persistable([msg])


# -------------------------------------------------------------------------- anthropic


@st.composite
def anthropic_message(draw: st.DrawFn) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    if draw(st.booleans()):
        blocks.append({"type": "thinking", "thinking": draw(TEXT), "signature": draw(IDENT)})
    if draw(st.booleans()):
        blocks.append({"type": "redacted_thinking", "data": draw(IDENT)})
    for text in draw(st.lists(TEXT, max_size=2)):
        block: dict[str, Any] = {"type": "text", "text": text}
        if draw(st.booleans()):
            block["citations"] = None
        blocks.append(block)
    for call_id in _call_ids(draw, draw(st.integers(0, 3))):
        blocks.append(
            {"type": "tool_use", "id": call_id, "name": draw(IDENT), "input": draw(ARGS_OBJECT)}
        )
    if not blocks:
        blocks.append({"type": "text", "text": "x"})
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": blocks,
            "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 1, "output_tokens": 1}}  # fmt: skip


@settings(max_examples=200, deadline=None)
@given(anthropic_message())
def test_anthropic_renders_back_the_content_blocks(message: dict[str, Any]) -> None:
    messages = anthropic.from_response(message)
    persistable(messages)
    rendered = anthropic.adapter.to_model_messages([], messages)["messages"]
    assert rendered[-1] == {"role": "assistant", "content": message["content"]}
    thinking = [b["thinking"] for b in message["content"] if b["type"] == "thinking"]
    assert messages[0].reasoning == ("\n".join(thinking) if thinking else None)


def test_anthropic_sdk_message_and_user_tool_results() -> None:
    from anthropic.types import Message

    sdk = Message.model_validate(
        {"id": "m", "type": "message", "role": "assistant", "model": "claude", "stop_reason": "tool_use",
         "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1},
         "content": [{"type": "thinking", "thinking": "plan", "signature": "sig"},
                     {"type": "tool_use", "id": "tu1", "name": "weather", "input": {"city": "Oslo"}}]}
    )  # fmt: skip
    [msg] = anthropic.from_response(sdk)
    assert msg.reasoning == "plan" and msg.tool_calls == [
        ToolCall(id="tu1", name="weather", arguments={"city": "Oslo"})
    ]
    results = anthropic.from_response(
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "tu1", "content": "rain", "is_error": False},
            {"type": "text", "text": "and tomorrow?"}]}
    )  # fmt: skip
    assert [(m.role, m.content) for m in results] == [("tool", "rain"), ("user", "and tomorrow?")]
    history = [ContextMessage(role="user", content="weather?"), msg, *results]
    persistable(history)
    rendered = anthropic.adapter.to_model_messages([], history)["messages"]
    assert rendered[1]["content"] == sdk.model_dump(mode="json", exclude_unset=True)["content"]
    # Thinking is Anthropic's own: the OpenAI formats get the call and no reasoning.
    assert "thinking" not in json.dumps(openai_chat.adapter.to_model_messages([], history))


# ------------------------------------------------------------------------- workers ai


@settings(max_examples=100, deadline=None)
@given(TEXT, st.lists(st.tuples(IDENT, ARGS_OBJECT), max_size=3), st.booleans())
def test_workers_ai_renders_back_text_and_calls(
    text: str, calls: list[tuple[str, dict[str, Any]]], envelope: bool
) -> None:
    response: dict[str, Any] = {
        "response": text,
        "tool_calls": [{"name": name, "arguments": args} for name, args in calls],
        "usage": {"prompt_tokens": 1},
    }
    payload = {"result": response, "success": True} if envelope else response
    messages = workers_ai.from_response(payload)
    persistable(messages)
    [rendered] = workers_ai.adapter.to_model_messages([], messages)["messages"]
    assert rendered["content"] == text
    got = [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in rendered.get("tool_calls", [])
    ]
    assert got == calls
    ids = [c["id"] for c in rendered.get("tool_calls", [])]
    assert len(set(ids)) == len(ids)


def test_workers_ai_openai_compatible_shape() -> None:
    [msg] = workers_ai.from_response(
        {"choices": [{"message": {"role": "assistant", "content": "hi", "reasoning_content": "r"}}]}
    )
    assert (msg.content, msg.reasoning) == ("hi", "r")


def test_parse_arguments_keeps_what_was_sent() -> None:
    assert parse_arguments('{"a":1}') == {"a": 1}
    assert parse_arguments('{"a": 1}') == {"a": 1}  # the text stays in provider items
    assert parse_arguments("[1]") == "[1]"
    assert parse_arguments("{oops") == "{oops"
    assert parse_arguments(None) == {}
    assert parse_arguments({"b": 2}) == {"b": 2}
