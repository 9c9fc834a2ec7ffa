"""Cloudflare Workers AI chat-completions format: ``{"messages": [...]}`` (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from session_server.core.codec import arguments_text
from session_server.core.events import ContextMessage

__all__ = ["WorkersAIAdapter", "adapter"]


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
