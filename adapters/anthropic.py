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
  (``core.codec.arguments_object``): a string holding a JSON object is that object,
  any other string (malformed JSON) becomes ``{"_raw": "<the string>"}``, any other
  value ``{"_value": <the value>}``.
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

Refused with ``RenderError``: the tool pairing problems of :mod:`adapters.checks`, images
on system or assistant messages, and images the API cannot take (a ``data:`` URL that is
not base64 or not JPEG/PNG/GIF/WebP, or a URL that is neither ``data:`` nor ``http(s)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from session_server.core.codec import arguments_object
from session_server.core.events import ContextMessage

from .checks import check_images, check_tool_pairing, render_error

__all__ = ["LEADING_USER_TEXT", "AnthropicAdapter", "adapter"]

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

    name: str = "anthropic"

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
