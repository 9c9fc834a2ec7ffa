"""``working_context_snapshot.json``: build, validate, read and restore (a cache, never truth).

Shape (reference schema_version 1): ``{schema_version, agent_id, epoch_id,
last_compaction_ts, messages: [{role, content, reasoning_content, image_urls, audio_urls,
video_urls, tool_payload}]}`` where ``tool_payload`` is ``{tool_calls: [{id, name,
arguments}]}`` (assistant) or ``{tool_call_id, tool_name, tool_result, tool_error}``
(tool), else ``null``. Our extra top-level keys: ``session_id``, ``last_seq`` (the session
seq the snapshot reflects, so a stale cache is detectable) and
``system_instruction_count`` (how many leading system messages are the instructions).

Decisions: ``content`` is always the message text (the reference writes ``null`` for
tool-call and tool messages; a reader accepts both), so a restore gives back the exact
messages; ``tool_result`` is the content parsed as JSON when it is JSON; message keys
``name``, ``metadata``, ``compacted`` are added only when set. Empty ``images`` restore as
``None``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..values.codec import encode_json
from ..values.events import ROLES, ContextMessage, Role, ToolCall
from .traces import parse_tool_result

__all__ = [
    "SNAPSHOT_FILE",
    "SNAPSHOT_SCHEMA_VERSION",
    "RestoredSnapshot",
    "build_snapshot",
    "message_from_snapshot",
    "message_to_snapshot",
    "restore_snapshot",
    "snapshot_problem",
    "validate_snapshot",
]

logger = logging.getLogger("session_server.mirror")

SNAPSHOT_FILE: Final = "working_context_snapshot.json"
SNAPSHOT_SCHEMA_VERSION: Final = 1


def message_to_snapshot(message: ContextMessage) -> dict[str, Any]:
    """One context message in the reference snapshot message shape."""
    payload: dict[str, Any] | None = None
    if message.tool_calls:
        payload = {
            "tool_calls": [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls
            ]
        }
    elif message.role == "tool":
        payload = {
            "tool_call_id": message.tool_call_id,
            "tool_name": message.name,
            "tool_result": None if message.is_error else parse_tool_result(message.content),
            "tool_error": message.content if message.is_error else None,
        }
    out: dict[str, Any] = {
        "role": message.role,
        "content": message.content,
        "reasoning_content": message.reasoning,
        "image_urls": list(message.images or ()),
        "audio_urls": [],
        "video_urls": [],
        "tool_payload": payload,
    }
    if message.name is not None and message.role != "tool":
        out["name"] = message.name
    if message.metadata is not None:
        out["metadata"] = message.metadata
    if message.compacted:
        out["compacted"] = True
    return out


def build_snapshot(
    *,
    agent_id: str,
    messages: Iterable[ContextMessage],
    system_instructions: Sequence[str] = (),
    epoch_id: int = 1,
    last_compaction_ts: float | None = None,
    last_seq: int | None = None,
    session_id: str | None = None,
) -> dict[str, Any]:
    """The snapshot payload: instructions first (as system messages), then ``messages``."""
    rendered = [
        message_to_snapshot(ContextMessage(role="system", content=s)) for s in system_instructions
    ]
    rendered.extend(message_to_snapshot(m) for m in messages)
    payload: dict[str, Any] = {
        "schema_version": SNAPSHOT_SCHEMA_VERSION,
        "agent_id": agent_id,
        "epoch_id": epoch_id,
        "last_compaction_ts": last_compaction_ts,
        "messages": rendered,
    }
    if session_id is not None:
        payload["session_id"] = session_id
    if last_seq is not None:
        payload["last_seq"] = last_seq
    payload["system_instruction_count"] = len(system_instructions)
    return payload


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def snapshot_problem(payload: object) -> str | None:
    """What makes ``payload`` an invalid snapshot (naming the field), or ``None`` when valid."""
    if not isinstance(payload, dict):
        return "snapshot: must be a JSON object"
    if not _is_int(payload.get("schema_version")):
        return "schema_version: must be an integer"
    if not isinstance(payload.get("agent_id"), str):
        return "agent_id: must be a string"
    messages = payload.get("messages")
    if not isinstance(messages, list):
        return "messages: must be a list"
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            return f"messages[{i}]: must be an object"
        role = msg.get("role")
        if not isinstance(role, str) or role not in ROLES:
            return f"messages[{i}].role: must be one of {', '.join(ROLES)}"
        if msg.get("content") is not None and not isinstance(msg.get("content"), str):
            return f"messages[{i}].content: must be a string or null"
        if msg.get("tool_payload") is not None and not isinstance(msg.get("tool_payload"), dict):
            return f"messages[{i}].tool_payload: must be an object or null"
    for key in ("last_seq", "epoch_id", "system_instruction_count"):
        if payload.get(key) is not None and not _is_int(payload.get(key)):
            return f"{key}: must be an integer"
    return None


def validate_snapshot(payload: object) -> bool:
    """Whether ``payload`` is a usable snapshot (see ``snapshot_problem``)."""
    return snapshot_problem(payload) is None


def _text(value: object) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else encode_json(value)


def message_from_snapshot(msg: dict[str, Any]) -> ContextMessage:
    """A context message from a (validated) snapshot message; reference files included."""
    role: Role = msg["role"]
    payload = msg.get("tool_payload") or {}
    content = msg.get("content")
    tool_calls: list[ToolCall] | None = None
    raw_calls = payload.get("tool_calls")
    if isinstance(raw_calls, list):
        tool_calls = [
            ToolCall(
                id=_text(c.get("id")),
                name=_text(c.get("name")),
                arguments=c.get("arguments", {}),
            )
            for c in raw_calls
            if isinstance(c, dict)
        ] or None
    is_error = False
    tool_call_id: str | None = None
    name = msg.get("name") if isinstance(msg.get("name"), str) else None
    if role == "tool":
        error = payload.get("tool_error")
        is_error = error is not None
        if content is None:
            content = _text(error) if is_error else _text(payload.get("tool_result"))
        raw_id = payload.get("tool_call_id")
        tool_call_id = None if raw_id is None else _text(raw_id)
        raw_name = payload.get("tool_name")
        name = None if raw_name is None else _text(raw_name)
    images = msg.get("image_urls")
    reasoning = msg.get("reasoning_content")
    metadata = msg.get("metadata")
    return ContextMessage(
        role=role,
        content=_text(content),
        name=name,
        tool_call_id=tool_call_id,
        tool_calls=tool_calls,
        metadata=metadata if isinstance(metadata, dict) else None,
        reasoning=reasoning if isinstance(reasoning, str) else None,
        images=[str(u) for u in images] if isinstance(images, list) and images else None,
        is_error=is_error,
        compacted=msg.get("compacted") is True,
    )


@dataclass(frozen=True, slots=True)
class RestoredSnapshot:
    """A snapshot turned back into a working context's parts."""

    agent_id: str
    system_instructions: list[str]
    messages: list[ContextMessage]
    epoch_id: int
    last_compaction_ts: float | None
    last_seq: int | None


def restore_snapshot(payload: dict[str, Any]) -> RestoredSnapshot:
    """Split a validated payload into instructions and messages."""
    messages = [message_from_snapshot(m) for m in payload["messages"]]
    count = payload.get("system_instruction_count") or 0
    instructions: list[str] = []
    while len(instructions) < count and messages and messages[0].role == "system":
        instructions.append(messages.pop(0).content)
    lct = payload.get("last_compaction_ts")
    return RestoredSnapshot(
        agent_id=payload["agent_id"],
        system_instructions=instructions,
        messages=messages,
        epoch_id=payload.get("epoch_id") or 1,
        last_compaction_ts=float(lct)
        if isinstance(lct, int | float) and not isinstance(lct, bool)
        else None,
        last_seq=payload.get("last_seq"),
    )
