"""Provider streams to live-turn chunks and the turn's messages (pure): events built as
the SDKs' own types (``model_validate``), and as plain dicts."""

from __future__ import annotations

from typing import Any

import pytest
from anthropic.types import RawMessageStreamEvent
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from session_server.adapters.streams import AnthropicStream, ChatCompletionStream, ResponsesStream
from session_server.values.streams import StreamLimits, encode_chunks


def chat_chunk(delta: dict[str, Any], finish: str | None = None) -> ChatCompletionChunk:
    return ChatCompletionChunk.model_validate(
        {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
         "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    )  # fmt: skip


def test_chat_completion_chunks() -> None:
    acc = ChatCompletionStream()
    events = [
        chat_chunk({"role": "assistant", "content": "Let me "}),
        chat_chunk({"content": "check."}),
        chat_chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                     "function": {"name": "get_weather", "arguments": ""}}]}),
        chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}),
        chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": ' "Paris"}'}}]}),
        chat_chunk({}, "tool_calls"),
    ]  # fmt: skip
    chunks = [c for e in events for c in acc.feed(e)]
    assert chunks[:2] == [{"type": "text", "text": "Let me "}, {"type": "text", "text": "check."}]
    assert chunks[2] == {
        "type": "tool_call", "index": 0, "id": "call_1", "name": "get_weather", "arguments": ""
    }  # fmt: skip
    assert "".join(c["arguments"] for c in chunks[2:]) == '{"city": "Paris"}'
    encode_chunks(chunks, StreamLimits())  # every chunk is one the server takes
    (message,) = acc.messages()
    assert message.role == "assistant" and message.content == "Let me check."
    assert message.tool_calls is not None
    assert message.tool_calls[0].name == "get_weather"
    assert message.tool_calls[0].arguments == {"city": "Paris"}


def test_chat_reasoning_deltas_as_dicts() -> None:
    acc = ChatCompletionStream()
    chunks = acc.feed({"choices": [{"delta": {"reasoning_content": "hmm"}}]})
    chunks += acc.feed({"choices": [{"delta": {"content": "42"}}]})
    chunks += acc.feed({"choices": []})  # a usage-only chunk
    assert chunks == [{"type": "reasoning", "text": "hmm"}, {"type": "text", "text": "42"}]
    (message,) = acc.messages()
    assert (message.content, message.reasoning) == ("42", "hmm")


RESPONSES = TypeAdapter(ResponseStreamEvent)


def responses_events() -> list[Any]:
    item = {
        "type": "message",
        "id": "m1",
        "status": "completed",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Hi there", "annotations": []}],
    }
    call = {
        "type": "function_call",
        "id": "fc1",
        "call_id": "call_9",
        "name": "lookup",
        "arguments": '{"q": 1}',
        "status": "completed",
    }
    raw = [
        {"type": "response.output_item.added", "output_index": 0, "sequence_number": 1,
         "item": {**item, "status": "in_progress", "content": []}},
        {"type": "response.output_text.delta", "output_index": 0, "content_index": 0,
         "item_id": "m1", "delta": "Hi ", "sequence_number": 2, "logprobs": []},
        {"type": "response.output_text.delta", "output_index": 0, "content_index": 0,
         "item_id": "m1", "delta": "there", "sequence_number": 3, "logprobs": []},
        {"type": "response.output_item.done", "output_index": 0, "item": item,
         "sequence_number": 4},
        {"type": "response.output_item.added", "output_index": 1, "sequence_number": 5,
         "item": {**call, "arguments": "", "status": "in_progress"}},
        {"type": "response.function_call_arguments.delta", "output_index": 1,
         "item_id": "fc1", "delta": '{"q": 1}', "sequence_number": 6},
        {"type": "response.output_item.done", "output_index": 1, "item": call,
         "sequence_number": 7},
    ]  # fmt: skip
    return [RESPONSES.validate_python(e) for e in raw]


def test_responses_stream_events() -> None:
    acc = ResponsesStream()
    chunks = [c for e in responses_events() for c in acc.feed(e)]
    assert chunks == [
        {"type": "text", "text": "Hi "},
        {"type": "text", "text": "there"},
        {"type": "tool_call", "index": 0, "id": "call_9", "name": "lookup", "arguments": ""},
        {"type": "tool_call", "index": 0, "arguments": '{"q": 1}'},
    ]
    messages = acc.messages()
    assert messages[0].content == "Hi there"
    calls = [c for m in messages for c in (m.tool_calls or [])]
    assert [(c.id, c.name, c.arguments) for c in calls] == [("call_9", "lookup", {"q": 1})]


ANTHROPIC = TypeAdapter(RawMessageStreamEvent)


def test_anthropic_message_stream_events() -> None:
    raw = [
        {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 5, "output_tokens": 0}}},
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "thinking_delta", "thinking": "Paris?"}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "signature_delta", "signature": "sig"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1,
         "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1,
         "delta": {"type": "text_delta", "text": "Checking"}},
        {"type": "content_block_stop", "index": 1},
        {"type": "content_block_start", "index": 2, "content_block": {
            "type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}},
        {"type": "content_block_delta", "index": 2,
         "delta": {"type": "input_json_delta", "partial_json": '{"city": '}},
        {"type": "content_block_delta", "index": 2,
         "delta": {"type": "input_json_delta", "partial_json": '"Paris"}'}},
        {"type": "content_block_stop", "index": 2},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
         "usage": {"output_tokens": 9}},
        {"type": "message_stop"},
    ]  # fmt: skip
    acc = AnthropicStream()
    chunks = [c for e in raw for c in acc.feed(ANTHROPIC.validate_python(e))]
    assert chunks == [
        {"type": "reasoning", "text": "Paris?"},
        {"type": "text", "text": "Checking"},
        {"type": "tool_call", "index": 0, "id": "toolu_1", "name": "get_weather",
         "arguments": ""},
        {"type": "tool_call", "index": 0, "arguments": '{"city": '},
        {"type": "tool_call", "index": 0, "arguments": '"Paris"}'},
    ]  # fmt: skip
    (message,) = acc.messages()
    assert message.content == "Checking" and message.reasoning == "Paris?"
    assert message.tool_calls is not None
    assert (message.tool_calls[0].id, message.tool_calls[0].arguments) == (
        "toolu_1",
        {"city": "Paris"},
    )


@pytest.mark.parametrize("acc", [ChatCompletionStream(), ResponsesStream(), AnthropicStream()])
def test_unknown_events_give_no_chunks(acc: Any) -> None:
    assert acc.feed({"type": "ping"}) == []
    assert acc.feed(None) == []
