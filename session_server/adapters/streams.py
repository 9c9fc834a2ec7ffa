"""Provider streams to live turns (pure): the SDKs' own streaming events in, session-server
chunks out, and at the end the turn's messages.

One accumulator per provider shape, each fed the events as the SDK yields them (SDK
objects or their ``model_dump()`` dicts):

- ``ChatCompletionStream``: OpenAI chat completion chunks (``stream=True``);
- ``ResponsesStream``: OpenAI Responses stream events (``response.output_text.delta`` ...);
- ``AnthropicStream``: Anthropic message stream events (``message_start``,
  ``content_block_delta`` ...).

``feed(event)`` returns the chunks to ``stream.append`` (possibly none): ``{"type":
"text", "text"}``, ``{"type": "reasoning", "text"}``, ``{"type": "tool_call", "index",
"id"?, "name"?, "arguments"}`` (argument text deltas). ``messages()`` is the reply as
``ContextMessage`` values, built by the adapter's own ``from_response`` from the message
the events add up to: what ``stream.close {turn}`` stores::

    acc = ChatCompletionStream()
    async for event in await openai.chat.completions.create(..., stream=True):
        await writer.write(*acc.feed(event))
    await writer.close([user_message, *acc.messages()])
"""

from __future__ import annotations

import json
from typing import Any

from ..values.events import ContextMessage
from . import anthropic as anthropic_adapter
from . import openai_chat, openai_responses
from .ingest import as_json

__all__ = ["AnthropicStream", "ChatCompletionStream", "ResponsesStream"]

Chunk = dict[str, Any]


def _text(kind: str, text: Any) -> list[Chunk]:
    return [{"type": kind, "text": text}] if isinstance(text, str) and text else []


def _call_chunk(index: int, call_id: Any, name: Any, arguments: Any) -> Chunk:
    chunk: Chunk = {"type": "tool_call", "index": index}
    if isinstance(call_id, str) and call_id:
        chunk["id"] = call_id
    if isinstance(name, str) and name:
        chunk["name"] = name
    chunk["arguments"] = arguments if isinstance(arguments, str) else ""
    return chunk


class ChatCompletionStream:
    """OpenAI chat completion chunks (the first choice) to chunks and one message."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.refusal: list[str] = []

    def feed(self, event: Any) -> list[Chunk]:
        data = as_json(event)
        choices = data.get("choices") if isinstance(data, dict) else None
        if not choices:
            return []
        delta = choices[0].get("delta") or {}
        out: list[Chunk] = []
        for key in ("reasoning_content", "reasoning"):
            piece = delta.get(key)
            if isinstance(piece, str) and piece:
                self.reasoning.append(piece)
                out += _text("reasoning", piece)
                break
        piece = delta.get("content")
        if isinstance(piece, str) and piece:
            self.content.append(piece)
            out += _text("text", piece)
        if isinstance(delta.get("refusal"), str):
            self.refusal.append(delta["refusal"])
        for call in delta.get("tool_calls") or ():
            index = int(call.get("index", 0))
            fn = call.get("function") or {}
            slot = self.calls.setdefault(index, {"id": None, "name": "", "arguments": ""})
            if call.get("id"):
                slot["id"] = call["id"]
            if fn.get("name"):
                slot["name"] += fn["name"]
            arguments = fn.get("arguments") or ""
            slot["arguments"] += arguments
            out.append(_call_chunk(index, call.get("id"), fn.get("name"), arguments))
        return out

    def message(self) -> dict[str, Any]:
        """The assistant message the chunks add up to (chat completion shape)."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content)}
        if self.reasoning:
            message["reasoning_content"] = "".join(self.reasoning)
        if self.refusal and not self.content:
            message["refusal"] = "".join(self.refusal)
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": c["id"] or f"call_{i}",
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"] or "{}"},
                }
                for i, c in sorted(self.calls.items())
            ]
        return message

    def messages(self) -> list[ContextMessage]:
        return openai_chat.from_response(self.message())


class ResponsesStream:
    """OpenAI Responses stream events to chunks and the output's messages."""

    def __init__(self) -> None:
        self.items: dict[int, Any] = {}
        self.response: Any = None
        self.call_index: dict[int, int] = {}

    def _index(self, output_index: int) -> int:
        return self.call_index.setdefault(output_index, len(self.call_index))

    def feed(self, event: Any) -> list[Chunk]:
        data = as_json(event)
        if not isinstance(data, dict):
            return []
        kind = data.get("type")
        if kind == "response.output_text.delta":
            return _text("text", data.get("delta"))
        if kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            return _text("reasoning", data.get("delta"))
        if kind == "response.output_item.added":
            item = data.get("item") or {}
            if item.get("type") == "function_call":
                index = self._index(int(data.get("output_index", 0)))
                return [_call_chunk(index, item.get("call_id"), item.get("name"), "")]
            return []
        if kind == "response.function_call_arguments.delta":
            index = self._index(int(data.get("output_index", 0)))
            return [_call_chunk(index, None, None, data.get("delta"))]
        if kind == "response.output_item.done":
            self.items[int(data.get("output_index", len(self.items)))] = data.get("item")
        elif kind in ("response.completed", "response.incomplete"):
            self.response = data.get("response")
        return []

    def messages(self) -> list[ContextMessage]:
        if isinstance(self.response, dict) and self.response.get("output"):
            return openai_responses.from_response(self.response)
        return openai_responses.from_response([self.items[i] for i in sorted(self.items)])


class AnthropicStream:
    """Anthropic message stream events to chunks and the message's messages."""

    def __init__(self) -> None:
        self.role = "assistant"
        self.blocks: dict[int, dict[str, Any]] = {}
        self.json: dict[int, list[str]] = {}
        self.call_index: dict[int, int] = {}

    def feed(self, event: Any) -> list[Chunk]:
        data = as_json(event)
        if not isinstance(data, dict):
            return []
        kind = data.get("type")
        if kind == "message_start":
            self.role = (data.get("message") or {}).get("role", "assistant")
            return []
        index = int(data.get("index", 0))
        if kind == "content_block_start":
            block = dict(data.get("content_block") or {})
            self.blocks[index] = block
            if block.get("type") == "tool_use":
                self.json[index] = []
                n = self.call_index.setdefault(index, len(self.call_index))
                return [_call_chunk(n, block.get("id"), block.get("name"), "")]
            if block.get("type") == "text":
                return _text("text", block.get("text"))
            return []
        if kind != "content_block_delta":
            return []
        delta = data.get("delta") or {}
        block = self.blocks.setdefault(index, {"type": "text", "text": ""})
        dtype = delta.get("type")
        if dtype == "text_delta":
            block["text"] = block.get("text", "") + delta.get("text", "")
            return _text("text", delta.get("text"))
        if dtype == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
            return _text("reasoning", delta.get("thinking"))
        if dtype == "signature_delta":
            block["signature"] = block.get("signature", "") + delta.get("signature", "")
            return []
        if dtype == "input_json_delta":
            partial = delta.get("partial_json", "")
            self.json.setdefault(index, []).append(partial)
            n = self.call_index.setdefault(index, len(self.call_index))
            return [_call_chunk(n, None, None, partial)]
        return []

    def message(self) -> dict[str, Any]:
        """The message the events add up to (``{role, content: [blocks]}``)."""
        content: list[dict[str, Any]] = []
        for index in sorted(self.blocks):
            block = dict(self.blocks[index])
            if block.get("type") == "tool_use":
                text = "".join(self.json.get(index, ()))
                block["input"] = as_json_object(text) if text else block.get("input") or {}
            content.append(block)
        return {"role": self.role, "content": content}

    def messages(self) -> list[ContextMessage]:
        return anthropic_adapter.from_response(self.message())


def as_json_object(text: str) -> Any:
    """A tool input's JSON text as a value (kept as text when it does not parse: the
    adapter then stores it as the arguments' raw text)."""
    try:
        return json.loads(text)
    except ValueError:
        return text
