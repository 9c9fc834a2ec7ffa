"""OpenAI Chat Completions format: ``{"messages": [...]}`` (pure).

The result is a list of ``ChatCompletionMessageParam`` objects, ready for
``client.chat.completions.create(messages=...)``:

- the system instructions become one leading ``system`` message, joined by a blank line
  (no such message when there are none); ``system`` messages inside the context (memory
  blocks, compaction notes) stay where they are, as ``system`` messages;
- user messages carry a string, or, when they have ``images``, content parts: a ``text``
  part (when the text is non-empty) followed by one ``image_url`` part per URL
  (``data:`` URLs included, passed through unchanged);
- assistant tool calls are native ``tool_calls`` (``type: "function"``, ``arguments`` a
  compact JSON string, or the string the model sent when it was stored as one, malformed
  JSON included); an assistant message with tool calls and no text has no ``content``
  key. A call group of several consecutive assistant messages with tool calls (the
  Responses shape: one call per item) becomes one assistant message, since every call
  must precede its results here: its texts joined by a blank line, its calls in order;
- tool results are ``role: "tool"`` messages with ``tool_call_id``; Chat Completions has
  no error flag, so an error result (``is_error``) is sent as its content, unchanged, and
  a compacted placeholder is sent as the content it holds;
- ``reasoning`` and ``metadata`` are never sent; ``name`` is sent on system, user and
  assistant messages (the tool message type has no ``name``).

- a message that keeps ``openai-chat`` provider items (see :mod:`adapters.ingest`) and was
  not compacted is sent as that item, verbatim; a message holding nothing but another
  format's provider items (a hosted-tool call, encrypted reasoning) is left out.

Refused with ``RenderError``: the tool pairing problems of :mod:`session_server.adapters.checks`, and
images on anything but a user message (Chat Completions accepts image parts only there).

Ingest (``from_response``): a chat completion (its first choice), a choice or a message,
as the SDK object or its ``model_dump()`` dict, becomes one message: ``content`` (``null``
reads as ``""``; a refusal with no content reads as the refusal text), ``tool_calls``
(arguments as :func:`adapters.ingest.parse_arguments` stores them: JSON objects
decoded, anything else kept as the string the model sent), ``reasoning_content`` or ``reasoning`` (as sent by DeepSeek, vLLM, OpenRouter) in
``reasoning``. The message's request fields (``role``, ``content``, ``name``,
``tool_calls``, ``refusal``, ``audio`` as ``{id}``, ``function_call``; ``null`` values and
response-only keys such as ``annotations`` dropped) are kept as its provider item when
rendering it from its fields would not give them back exactly (arguments not in compact
JSON, a refusal, audio), so rendering gives back the provider's own message. Reasoning is
never sent back (DeepSeek refuses it in requests).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from session_server.values.codec import arguments_text
from session_server.values.errors import InvalidParamsError
from session_server.values.events import ContextMessage, ToolCall

from .checks import call_groups, check_images, check_tool_pairing
from .ingest import (
    as_json,
    has_foreign_items_only,
    keep_items,
    parse_arguments,
    provider_items,
    require_mapping,
)

__all__ = ["OpenAIChatAdapter", "adapter", "from_response", "request_fields"]

NAME: Final = "openai-chat"
_REQUEST_KEYS: Final = (
    "role",
    "content",
    "name",
    "tool_calls",
    "refusal",
    "audio",
    "function_call",
)


def _user_content(msg: ContextMessage) -> str | list[dict[str, Any]]:
    if not msg.images:
        return msg.content
    parts: list[dict[str, Any]] = []
    if msg.content:
        parts.append({"type": "text", "text": msg.content})
    parts.extend({"type": "image_url", "image_url": {"url": url}} for url in msg.images)
    return parts


def _merged(group: list[ContextMessage]) -> ContextMessage:
    """One assistant message holding every call of a call group."""
    if len(group) == 1:
        return group[0]
    return ContextMessage(
        role="assistant",
        content="\n\n".join(m.content for m in group if m.content),
        name=next((m.name for m in group if m.name is not None), None),
        tool_calls=[call for m in group for call in m.tool_calls or ()],
    )


def _render(msg: ContextMessage) -> dict[str, Any]:
    kept = provider_items(msg, NAME)
    if kept is not None:
        return dict(kept[0])
    return _render_fields(msg)


def _render_fields(msg: ContextMessage) -> dict[str, Any]:
    if msg.role == "tool":
        assert msg.tool_call_id is not None  # check_tool_pairing guarantees it
        return {"role": "tool", "tool_call_id": msg.tool_call_id, "content": msg.content}
    item: dict[str, Any] = {"role": msg.role}
    if msg.role == "user":
        item["content"] = _user_content(msg)
    elif msg.role == "assistant" and msg.tool_calls:
        if msg.content:
            item["content"] = msg.content
        item["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": arguments_text(call.arguments)},
            }
            for call in msg.tool_calls
        ]
    else:
        item["content"] = msg.content
    if msg.name is not None:
        item["name"] = msg.name
    return item


@dataclass(frozen=True)
class OpenAIChatAdapter:
    """Renders a context as Chat Completions ``messages`` (see the module docstring)."""

    name: str = NAME

    def to_model_messages(
        self, system_instructions: Sequence[str], messages: Sequence[ContextMessage]
    ) -> dict[str, Any]:
        check_tool_pairing(messages)
        check_images(messages, adapter=self.name, roles=("user",))
        out: list[dict[str, Any]] = []
        if system_instructions:
            out.append({"role": "system", "content": "\n\n".join(system_instructions)})
        # A message holding only another format's items has nothing to send here.
        sendable = [msg for msg in messages if not has_foreign_items_only(msg, NAME)]
        out.extend(_render(_merged(group)) for group in call_groups(sendable))
        return {"messages": out}


adapter = OpenAIChatAdapter()


def request_fields(message: dict[str, Any]) -> dict[str, Any]:
    """The fields of a chat message that a request may carry (the message's "own" fields):
    ``null`` values and response-only keys dropped, ``audio`` reduced to ``{id}``."""
    out: dict[str, Any] = {}
    for key in _REQUEST_KEYS:
        value = message.get(key)
        if value is None:
            continue
        if key == "audio" and isinstance(value, dict):
            value = {"id": value.get("id")}
        out[key] = value
    return out


def _message_of(payload: Any) -> dict[str, Any]:
    data = require_mapping(payload, "payload")
    if isinstance(data.get("choices"), list):
        choices = data["choices"]
        data = require_mapping(choices[0] if choices else None, "payload.choices[0]")
    if "message" in data and "role" not in data:
        data = require_mapping(data["message"], "payload.message")
    return data


def _chat_call(call: Any, i: int) -> ToolCall:
    call = require_mapping(call, f"payload.tool_calls[{i}]")
    fn = call.get("function") or call.get("custom") or {}
    raw = fn.get("arguments", fn.get("input"))
    arguments = parse_arguments(raw) if "arguments" in fn else {"input": raw}
    return ToolCall(
        id=str(call.get("id") or ""), name=str(fn.get("name") or ""), arguments=arguments
    )


def from_response(payload: Any) -> list[ContextMessage]:
    """One message for a chat completion, choice or message (see the module docstring)."""
    message = _message_of(as_json(payload))
    role: Any = message.get("role") or "assistant"
    if role == "developer":
        role = "system"
    if role not in ("system", "user", "assistant", "tool"):
        raise InvalidParamsError(
            f"payload.role: unknown chat role {role!r}", data={"field": "payload.role"}
        )
    content = message.get("content")
    text = content if isinstance(content, str) else ""
    if isinstance(content, list):
        text = "\n".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    if not text and isinstance(message.get("refusal"), str):
        text = message["refusal"]
    reasoning = message.get("reasoning_content", message.get("reasoning"))
    calls = [_chat_call(c, i) for i, c in enumerate(message.get("tool_calls") or ())]
    msg = ContextMessage(
        role=role,
        content=text,
        tool_calls=calls or None,
        tool_call_id=message.get("tool_call_id") if role == "tool" else None,
        reasoning=reasoning if isinstance(reasoning, str) and reasoning else None,
    )
    own = request_fields(message)
    if role == "tool":
        own["tool_call_id"] = message.get("tool_call_id")
    return [keep_items(msg, NAME, [own], [_render_fields(msg)])]
