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

Refused with ``RenderError``: the tool pairing problems of :mod:`adapters.checks`, and
images on anything but a user message (Chat Completions accepts image parts only there).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from session_server.core.codec import arguments_text
from session_server.core.events import ContextMessage

from .checks import call_groups, check_images, check_tool_pairing

__all__ = ["OpenAIChatAdapter", "adapter"]


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

    name: str = "openai-chat"

    def to_model_messages(
        self, system_instructions: Sequence[str], messages: Sequence[ContextMessage]
    ) -> dict[str, Any]:
        check_tool_pairing(messages)
        check_images(messages, adapter=self.name, roles=("user",))
        out: list[dict[str, Any]] = []
        if system_instructions:
            out.append({"role": "system", "content": "\n\n".join(system_instructions)})
        out.extend(_render(_merged(group)) for group in call_groups(messages))
        return {"messages": out}


adapter = OpenAIChatAdapter()
