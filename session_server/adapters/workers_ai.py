"""Cloudflare Workers AI chat-completions format: ``{"messages": [...]}`` (pure).

Ingest (``from_response``): a Workers AI response becomes one assistant message. Both
shapes are read: the native one (``{"response": text, "tool_calls": [{name, arguments}]}``,
possibly wrapped in the REST envelope ``{"result": {...}, "success": true}``) and the
OpenAI-compatible one (``choices``, read by :func:`adapters.openai_chat.from_response`).
``reasoning_content`` goes to ``reasoning``. Native tool calls carry no id: each gets a
fresh ``call_<hex>`` id (the one non-deterministic part of ingest), since a deterministic
id would repeat when the model repeats a call in a later turn, and providers refuse a
reused call id. ``arguments`` objects are kept, strings decoded (see
:func:`adapters.ingest.parse_arguments`). Rendering the message gives back the response's
text and calls in this format.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from session_server.values.codec import arguments_text, encode_json
from session_server.values.events import ContextMessage, ToolCall

from . import openai_chat
from .ingest import as_json, parse_arguments, require_mapping

__all__ = ["WorkersAIAdapter", "adapter", "from_response"]


@dataclass(frozen=True)
class WorkersAIAdapter:
    """One leading system message joining the instructions with a blank line (none when
    there are none); ``tool_calls`` as ``{id, type: "function", function: {name,
    arguments: <JSON string>}}``; ``tool_call_id`` and ``name`` only when set."""

    name: str = "workers-ai"

    def to_model_messages(
        self, system_instructions: Sequence[str], messages: Sequence[ContextMessage]
    ) -> dict[str, Any]:
        out: list[dict[str, Any]] = []
        if system_instructions:
            out.append({"role": "system", "content": "\n\n".join(system_instructions)})
        for msg in messages:
            item: dict[str, Any] = {"role": msg.role, "content": msg.content}
            if msg.tool_calls:
                item["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.name,
                            "arguments": arguments_text(call.arguments),
                        },
                    }
                    for call in msg.tool_calls
                ]
            if msg.tool_call_id is not None:
                item["tool_call_id"] = msg.tool_call_id
            if msg.name is not None:
                item["name"] = msg.name
            out.append(item)
        return {"messages": out}


adapter = WorkersAIAdapter()


def _call(raw: Any, i: int) -> ToolCall:
    call = require_mapping(raw, f"payload.tool_calls[{i}]")
    fn: dict[str, Any] = call["function"] if isinstance(call.get("function"), dict) else call
    call_id = call.get("id")
    return ToolCall(
        id=call_id if isinstance(call_id, str) and call_id else f"call_{uuid.uuid4().hex[:24]}",
        name=str(fn.get("name") or ""),
        arguments=parse_arguments(fn.get("arguments")),
    )


def from_response(payload: Any) -> list[ContextMessage]:
    """One assistant message for a Workers AI response (see the module docstring)."""
    data = require_mapping(as_json(payload), "payload")
    if isinstance(data.get("result"), dict):
        data = data["result"]
    if "choices" in data:
        return openai_chat.from_response(data)
    text = data.get("response")
    reasoning = data.get("reasoning_content")
    calls = [_call(c, i) for i, c in enumerate(data.get("tool_calls") or ())]
    return [
        ContextMessage(
            role="assistant",
            content=text if isinstance(text, str) else "" if text is None else encode_json(text),
            tool_calls=calls or None,
            reasoning=reasoning if isinstance(reasoning, str) and reasoning else None,
        )
    ]
