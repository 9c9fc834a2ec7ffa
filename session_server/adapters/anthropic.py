"""Anthropic Messages API format: ``{"system": ..., "messages": [...]}`` (pure).

The result is ready for ``client.messages.create(system=..., messages=...)``; every
message is an Anthropic ``MessageParam`` with ``role`` ``user`` or ``assistant`` and a
list of content blocks. (This module never imports the ``anthropic`` SDK.)

- ``system``: the system instructions, then the content of every ``system`` message of
  the context (memory blocks, compaction summaries) in their order, joined by a blank
  line. Choice: system messages inside the history are *appended to* ``system`` rather
  than kept in place, because the Messages API takes instructions at the top level and
  keeps ``messages`` to user/assistant turns. ``system`` is omitted when it is empty.
- user messages: a ``text`` block (when the text is non-empty) then one ``image`` block
  per URL: ``data:`` URLs become ``base64`` sources (JPEG, PNG, GIF or WebP, base64
  encoded), ``http(s)`` URLs become ``url`` sources.
- assistant messages: a ``text`` block (when non-empty) then one ``tool_use`` block per
  tool call (``id``, ``name``, ``input`` = the arguments object). ``input`` must be an
  object: arguments a model sent as anything else are wrapped
  (``values.codec.arguments_object``): a string holding a JSON object is that object,
  an empty or blank string is ``{}``, any other string (malformed JSON) becomes
  ``{"_raw": "<the string>"}``, any other value ``{"_value": <the value>}``.
- tool results: ``tool_result`` blocks (``tool_use_id``; ``content`` the text, or text
  and image blocks when the result has images; ``is_error: true`` for an error result)
  inside the user message that follows the assistant message; the results of one
  assistant turn share one user message. A compacted placeholder is sent as the text it
  holds.
- strict alternation: adjacent messages of the same role are merged into one message
  (their blocks concatenated in order), so tool results and a following user text share
  one user message, results first, as the API requires.
- messages with nothing to send (empty text, no images, no tool calls) are dropped.
- the first message must be a user message. Choice: when the history starts with an
  assistant message (for example a greeting, or a window that begins mid-conversation),
  a minimal user message whose text is :data:`LEADING_USER_TEXT` is prepended, so the
  request is accepted and the assistant's words stay verbatim.
- ``reasoning``, ``metadata`` and ``name`` are never sent.

- a message that keeps ``anthropic`` provider items (its content blocks, see
  :mod:`adapters.ingest`) and was not compacted is sent as those blocks, verbatim
  (``thinking`` blocks with their signatures, ``redacted_thinking``, server-tool blocks,
  citations); provider items of other formats are left out.

Refused with ``RenderError``: the tool pairing problems of :mod:`session_server.adapters.checks`, images
on system or assistant messages, and images the API cannot take (a ``data:`` URL that is
not base64 or not JPEG/PNG/GIF/WebP, or a URL that is neither ``data:`` nor ``http(s)``).

Ingest (``from_response``): an Anthropic message ``{role, content}`` (the SDK ``Message``
or its ``model_dump()``; ``content`` a string or blocks) becomes messages. An assistant
message becomes one message: ``text`` blocks joined by a newline, ``tool_use`` blocks as
``tool_calls`` (``input`` as sent), ``thinking`` text
in ``reasoning``. A user message becomes one ``tool`` message per ``tool_result`` block
(``is_error`` kept, text blocks of its content joined) and one user message for its text
and ``image`` blocks (``base64`` sources as ``data:`` URLs). The blocks are kept as the
message's provider items when rendering it from its fields would not give them back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from session_server.values.codec import arguments_object
from session_server.values.errors import InvalidParamsError, RenderError
from session_server.values.events import ContextMessage, ToolCall

from .checks import check_images, check_tool_pairing, render_error
from .ingest import (
    as_json,
    has_foreign_items_only,
    keep_items,
    parse_arguments,
    provider_items,
    require_mapping,
)

__all__ = ["LEADING_USER_TEXT", "AnthropicAdapter", "adapter", "from_response"]

NAME: Final = "anthropic"

LEADING_USER_TEXT: Final[str] = "(conversation continues)"
"""Text of the user message prepended when the history starts with an assistant message."""

_MEDIA_TYPES: Final[frozenset[str]] = frozenset(
    {"image/jpeg", "image/png", "image/gif", "image/webp"}
)


def _image_block(url: str, index: int, k: int) -> dict[str, Any]:
    field = f"images[{k}]"
    if url.startswith("data:"):
        header, comma, data = url[5:].partition(",")
        media_type, *params = header.split(";")
        media_type = media_type.strip().lower()
        if not comma or "base64" not in params or media_type not in _MEDIA_TYPES:
            raise render_error(
                index,
                "anthropic accepts data: URLs only as base64-encoded image/jpeg, "
                "image/png, image/gif or image/webp",
                field=field,
            )
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data},
        }
    if url.startswith(("http://", "https://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise render_error(index, "anthropic accepts only data: and http(s) image URLs", field=field)


def _text_and_images(msg: ContextMessage, index: int) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if msg.content:
        blocks.append({"type": "text", "text": msg.content})
    blocks.extend(_image_block(url, index, k) for k, url in enumerate(msg.images or ()))
    return blocks


def _tool_result(msg: ContextMessage, index: int) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": msg.tool_call_id}
    if msg.images:
        block["content"] = _text_and_images(msg, index)
    elif msg.content:
        block["content"] = msg.content
    if msg.is_error:
        block["is_error"] = True
    return block


def _blocks(msg: ContextMessage, index: int) -> list[dict[str, Any]]:
    kept = provider_items(msg, NAME)
    if kept is not None:
        return [dict(block) for block in kept]
    if has_foreign_items_only(msg, NAME):
        return []
    return _field_blocks(msg, index)


def _field_blocks(msg: ContextMessage, index: int) -> list[dict[str, Any]]:
    if msg.role == "tool":
        return [_tool_result(msg, index)]
    blocks = _text_and_images(msg, index)
    blocks.extend(
        {
            "type": "tool_use",
            "id": call.id,
            "name": call.name,
            "input": arguments_object(call.arguments),
        }
        for call in msg.tool_calls or ()
    )
    return blocks


@dataclass(frozen=True)
class AnthropicAdapter:
    """Renders a context as Messages API ``system`` + ``messages`` (see the module docstring)."""

    name: str = NAME

    def to_model_messages(
        self, system_instructions: Sequence[str], messages: Sequence[ContextMessage]
    ) -> dict[str, Any]:
        check_tool_pairing(messages)
        check_images(messages, adapter=self.name, roles=("tool", "user"))
        system = [text for text in system_instructions if text]
        out: list[dict[str, Any]] = []
        for i, msg in enumerate(messages):
            if msg.role == "system":
                if msg.content:
                    system.append(msg.content)
                continue
            blocks = _blocks(msg, i)
            if not blocks:
                continue
            role = "assistant" if msg.role == "assistant" else "user"
            if out and out[-1]["role"] == role:
                out[-1]["content"].extend(blocks)
            else:
                out.append({"role": role, "content": blocks})
        if out and out[0]["role"] == "assistant":
            out.insert(
                0, {"role": "user", "content": [{"type": "text", "text": LEADING_USER_TEXT}]}
            )
        result: dict[str, Any] = {}
        if system:
            result["system"] = "\n\n".join(system)
        result["messages"] = out
        return result


adapter = AnthropicAdapter()


# ------------------------------------------------------------------------------- ingest


def _text_of(blocks: list[Any]) -> str:
    return "\n".join(
        b["text"]
        for b in blocks
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    )


def _image_url(block: dict[str, Any]) -> str | None:
    source = block.get("source")
    if not isinstance(source, dict):
        return None
    if source.get("type") == "base64":
        return f"data:{source.get('media_type')};base64,{source.get('data')}"
    url = source.get("url")
    return url if isinstance(url, str) else None


def _images_of(blocks: list[Any]) -> list[str] | None:
    urls = [
        url
        for b in blocks
        if isinstance(b, dict) and b.get("type") == "image" and (url := _image_url(b))
    ]
    return urls or None


def _rendered(msg: ContextMessage) -> list[dict[str, Any]] | None:
    try:
        return _field_blocks(msg, 0)
    except RenderError:  # e.g. an image type the request format refuses: keep the blocks
        return None


def _assistant(blocks: list[dict[str, Any]]) -> ContextMessage:
    calls = [
        ToolCall(
            id=str(b.get("id") or ""),
            name=str(b.get("name") or ""),
            arguments=parse_arguments(b.get("input")),
        )
        for b in blocks
        if b.get("type") == "tool_use"
    ]
    thinking = [
        b["thinking"]
        for b in blocks
        if b.get("type") == "thinking" and isinstance(b.get("thinking"), str)
    ]
    msg = ContextMessage(
        role="assistant",
        content=_text_of(blocks),
        tool_calls=calls or None,
        reasoning="\n".join(thinking) if thinking else None,
    )
    return keep_items(msg, NAME, blocks, _rendered(msg))


def _user(blocks: list[dict[str, Any]]) -> list[ContextMessage]:
    out: list[ContextMessage] = []
    rest: list[dict[str, Any]] = []
    for block in blocks:
        if block.get("type") != "tool_result":
            rest.append(block)
            continue
        content = block.get("content")
        parts = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        msg = ContextMessage(
            role="tool",
            content=_text_of(parts),
            tool_call_id=str(block.get("tool_use_id") or ""),
            images=_images_of(parts),
            is_error=bool(block.get("is_error")),
        )
        out.append(keep_items(msg, NAME, [block], _rendered(msg)))
    if rest:
        msg = ContextMessage(role="user", content=_text_of(rest), images=_images_of(rest))
        out.append(keep_items(msg, NAME, rest, _rendered(msg)))
    return out


def from_response(payload: Any) -> list[ContextMessage]:
    """Messages for an Anthropic message (see the module docstring)."""
    message = require_mapping(as_json(payload), "payload")
    role = message.get("role", "assistant")
    content = message.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise InvalidParamsError(
            "payload.content: must be a string or a list of blocks",
            data={"field": "payload.content"},
        )
    blocks = [require_mapping(b, f"payload.content[{i}]") for i, b in enumerate(content)]
    if role == "assistant":
        return [_assistant(blocks)]
    if role == "user":
        return _user(blocks)
    raise InvalidParamsError(
        f"payload.role: must be 'assistant' or 'user', got {role!r}",
        data={"field": "payload.role"},
    )
