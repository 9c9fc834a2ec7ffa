"""Placeholder compaction of tool payloads in built messages (pure).

A compacted tool output keeps its message (role ``tool``, ``tool_call_id``, ``name``) so
the model still sees that the call happened and answered; only its content becomes::

    ⟦removed: tool output for <tool_name> (call_id=<id>); reason=context_compaction⟧

and ``compacted=True`` is set (images attached to the result are dropped too).

Tool inputs (with ``compact_clear_tool_inputs``) are represented this way: the
compacted call keeps its ``id`` and ``name`` but its ``arguments`` become ``{}``, and the
assistant message's content gets one line per cleared call (after any text it had)::

    ⟦removed: tool input for <tool_name> (call_id=<id>); reason=context_compaction⟧

A tool is selected when ``include`` is non-empty and names it, or when ``include`` is
empty and ``exclude`` does not name it (include wins over exclude).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from ..values.events import ContextMessage, SessionEvent, ToolCall

__all__ = [
    "PlaceholderParams",
    "call_name_index",
    "compact_message",
    "input_placeholder",
    "output_placeholder",
    "tool_selected",
]

UNKNOWN_TOOL = "unknown"


def output_placeholder(tool_name: str, call_id: str) -> str:
    return f"⟦removed: tool output for {tool_name} (call_id={call_id}); reason=context_compaction⟧"


def input_placeholder(tool_name: str, call_id: str) -> str:
    return f"⟦removed: tool input for {tool_name} (call_id={call_id}); reason=context_compaction⟧"


class PlaceholderParams(msgspec.Struct, frozen=True):
    """What a compact record replaces: events with ``seq < boundary_seq``."""

    boundary_seq: int
    clear_tool_inputs: bool = False
    include_tools: frozenset[str] = frozenset()
    exclude_tools: frozenset[str] = frozenset()

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> PlaceholderParams:
        """Read ``boundary_seq`` and the record's ``params`` (missing lists read as empty)."""
        params = record.get("params") or {}
        return cls(
            boundary_seq=int(record["boundary_seq"]),
            clear_tool_inputs=bool(params.get("compact_clear_tool_inputs", False)),
            include_tools=frozenset(params.get("compact_include_tools") or ()),
            exclude_tools=frozenset(params.get("compact_exclude_tools") or ()),
        )


def tool_selected(name: str, include: frozenset[str], exclude: frozenset[str]) -> bool:
    """Include wins: with a non-empty include list only those tools are compacted."""
    if include:
        return name in include
    return name not in exclude


def compact_message(
    event: SessionEvent,
    message: ContextMessage,
    params: PlaceholderParams,
    call_names: Mapping[str, str],
) -> tuple[ContextMessage, int]:
    """The message with placeholders applied, and how many payloads it replaced.

    Only events with ``seq < params.boundary_seq`` change. ``call_names`` maps call ids
    to tool names, used when a result does not carry its tool name.
    """
    if event.seq >= params.boundary_seq:
        return message, 0
    if event.action == "tool_result":
        call_id = event.tool_call_id or ""
        name = event.tool_name or call_names.get(call_id) or UNKNOWN_TOOL
        if not tool_selected(name, params.include_tools, params.exclude_tools):
            return message, 0
        return (
            msgspec.structs.replace(
                message,
                content=output_placeholder(name, call_id),
                images=None,
                compacted=True,
            ),
            1,
        )
    if event.action == "tool_call_request" and params.clear_tool_inputs and message.tool_calls:
        calls: list[ToolCall] = []
        lines: list[str] = []
        for call in message.tool_calls:
            if tool_selected(call.name, params.include_tools, params.exclude_tools):
                calls.append(ToolCall(id=call.id, name=call.name, arguments={}))
                lines.append(input_placeholder(call.name or UNKNOWN_TOOL, call.id))
            else:
                calls.append(call)
        if not lines:
            return message, 0
        content = "\n".join([message.content, *lines] if message.content else lines)
        return (
            msgspec.structs.replace(message, content=content, tool_calls=calls, compacted=True),
            len(lines),
        )
    return message, 0


def call_name_index(events: Sequence[SessionEvent]) -> dict[str, str]:
    """Call id -> tool name for every call requested among ``events``."""
    names: dict[str, str] = {}
    for ev in events:
        if ev.action == "tool_call_request":
            for call in ev.tool_calls or ():
                names.setdefault(call.id, call.name)
    return names
