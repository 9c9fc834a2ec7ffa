"""OpenAI Responses API format: ``{"instructions": ..., "input": [...]}`` (pure).

The result is ready for ``client.responses.create(instructions=..., input=...)``; every
``input`` item is a ``ResponseInputItemParam``.

Choice: the system instructions go to the top-level ``instructions`` field (joined by a
blank line), not to a leading ``system`` input item. ``instructions`` is the Responses
API's own slot for them: it applies to this request only and is not carried over when a
later request chains with ``previous_response_id``, which is what a working context,
rebuilt for every request, wants. ``instructions`` is omitted when there are none.
``system`` messages inside the context (memory blocks, compaction notes) are kept in
place as ``{"type": "message", "role": "system"}`` input items.

Items:

- user messages: ``{"type": "message", "role": "user", "content": <str>}``, or, when the
  message has ``images``, content parts: ``input_text`` (when the text is non-empty) then
  one ``input_image`` per URL (``detail: "auto"``; ``data:`` URLs passed unchanged);
- assistant messages: a ``message`` item with the text (omitted when the message has tool
  calls and no text), then one native ``function_call`` item per tool call
  (``call_id``, ``name``, ``arguments`` a compact JSON string, or the string the model
  sent when it was stored as one, malformed JSON included; no item ``id``: the
  provider's ``fc_...`` ids are not known here). Consecutive assistant messages with
  tool calls (the API's own shape, one ``function_call`` per item) stay consecutive
  items, their outputs after them;
- tool results: ``function_call_output`` items paired by ``call_id``; ``output`` is the
  content (a compacted placeholder passes through as it is), or, with images, a list of
  ``input_text``/``input_image`` parts. The format has no error flag: an error result
  (``is_error``) is sent as its content, unchanged;
- ``reasoning``, ``metadata`` and ``name`` are never sent.

Refused with ``RenderError``: the tool pairing problems of :mod:`adapters.checks`, and
images on system or assistant messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from session_server.core.codec import arguments_text
from session_server.core.events import ContextMessage

from .checks import check_images, check_tool_pairing

__all__ = ["OpenAIResponsesAdapter", "adapter"]


def _parts(msg: ContextMessage) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if msg.content:
        parts.append({"type": "input_text", "text": msg.content})
    parts.extend(
        {"type": "input_image", "image_url": url, "detail": "auto"} for url in msg.images or ()
    )
    return parts


def _render(msg: ContextMessage) -> list[dict[str, Any]]:
    if msg.role == "tool":
        output: str | list[dict[str, Any]] = _parts(msg) if msg.images else msg.content
        return [{"type": "function_call_output", "call_id": msg.tool_call_id, "output": output}]
    if msg.role == "user":
        content: str | list[dict[str, Any]] = _parts(msg) if msg.images else msg.content
        return [{"type": "message", "role": "user", "content": content}]
    items: list[dict[str, Any]] = []
    if msg.content or not msg.tool_calls:
        items.append({"type": "message", "role": msg.role, "content": msg.content})
    items.extend(
        {
            "type": "function_call",
            "call_id": call.id,
            "name": call.name,
            "arguments": arguments_text(call.arguments),
        }
        for call in msg.tool_calls or ()
    )
    return items


@dataclass(frozen=True)
class OpenAIResponsesAdapter:
    """Renders a context as Responses API ``input`` items (see the module docstring)."""

    name: str = "openai-responses"

    def to_model_messages(
        self, system_instructions: Sequence[str], messages: Sequence[ContextMessage]
    ) -> dict[str, Any]:
        check_tool_pairing(messages)
        check_images(messages, adapter=self.name, roles=("tool", "user"))
        out: dict[str, Any] = {}
        if system_instructions:
            out["instructions"] = "\n\n".join(system_instructions)
        out["input"] = [item for msg in messages for item in _render(msg)]
        return out


adapter = OpenAIResponsesAdapter()
