"""Row <-> event and event <-> message mapping (pure).

Rows are the SQL shape ``{id, session_id, seq, action, content, metadata, created_at}``
with ``metadata`` a compact JSON string or ``None``. The metadata JSON uses the reference
module's keys (``model``, ``toolCalls``, ``toolCallId``, ``toolName``, ``isSuccess``,
``compactedEventCount``) so rows written by the reference SQL primitives read unchanged.
Our own keys sit beside them: ``compaction`` (the compaction record), ``reasoning``,
``images``; every other key is the event's free-form ``metadata``.
"""

from __future__ import annotations

import os
import time
from typing import Any, Final

import msgspec

from .errors import CorruptRecordError
from .events import ACTIONS, Action, ContextMessage, SessionEvent, ToolArguments, ToolCall

__all__ = [
    "OWN_METADATA_KEYS",
    "arguments_object",
    "arguments_text",
    "dehydrate_event",
    "encode_json",
    "encode_json_bytes",
    "event_metadata",
    "event_to_message",
    "hydrate_event",
    "message_to_event",
    "new_event_id",
    "new_event_ids",
    "now_ms",
]

_ENCODER: Final = msgspec.json.Encoder()
_DECODER: Final = msgspec.json.Decoder()

# Keys this module owns inside the metadata JSON; anything else is free-form metadata.
OWN_METADATA_KEYS: Final[dict[str, tuple[str, ...]]] = {
    "user_message": ("images", "reasoning"),
    "agent_message": ("model", "reasoning", "images"),
    "tool_call_request": ("toolCalls", "reasoning", "model", "images"),
    "tool_result": ("toolCallId", "toolName", "isSuccess", "images"),
    "system_instruction": (),
    "compaction": ("compactedEventCount", "compaction"),
}


def encode_json(value: Any) -> str:
    """Compact JSON (``,``/``:`` separators) with non-ASCII characters kept as they are."""
    return _ENCODER.encode(value).decode("utf-8")


def encode_json_bytes(value: Any) -> bytes:
    """``encode_json(value)`` as UTF-8 bytes, without the round trip through text (the
    encoder only writes valid UTF-8: it refuses lone surrogates)."""
    return _ENCODER.encode(value)


def arguments_text(arguments: ToolArguments) -> str:
    """Tool call arguments as the JSON string the OpenAI formats carry.

    A string is the text the model sent and is passed through unchanged (even when it is
    not valid JSON); any other value is encoded as compact JSON.
    """
    return arguments if isinstance(arguments, str) else encode_json(arguments)


def arguments_object(arguments: ToolArguments) -> dict[str, Any]:
    """Tool call arguments as an object (Anthropic's ``tool_use.input`` must be one).

    An object is returned as a copy; a string holding a JSON object is that object; any
    other string (malformed JSON, or JSON that is not an object) is wrapped as
    ``{"_raw": <the string>}``; any other value as ``{"_value": <the value>}``. An empty
    (or blank) string is ``{}``: what models send for a tool without parameters.
    """
    if isinstance(arguments, dict):
        return dict(arguments)
    if isinstance(arguments, str):
        if not arguments.strip():
            return {}
        try:
            value = _DECODER.decode(arguments)
        except (msgspec.DecodeError, RecursionError):  # too deep: kept as the text it is
            return {"_raw": arguments}
        return value if isinstance(value, dict) else {"_raw": arguments}
    return {"_value": arguments}


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def new_event_id() -> str:
    return new_event_ids(1)[0]


# A random hex digit -> the same digit's low 2 bits under the RFC 9562 variant bits 10.
_VARIANT: Final = {f"{d:x}": "89ab"[d & 3] for d in range(16)}


def new_event_ids(count: int) -> list[str]:
    """``count`` fresh version 7 UUIDs (RFC 9562) as strings, from one ``os.urandom`` call.

    Time-ordered: the 48-bit Unix time in ms leads, then 74 random bits. The events
    table's unique index on ``id`` then grows at its end, like the seq index: a random
    (version 4) id put each new event on a random leaf page of that index, so a turn of
    4 events dirtied up to 4 more pages, and at ``synchronous=FULL`` every dirty page is
    written and flushed to the WAL on commit. Ids stay unique (74 random bits per ms) and
    opaque: nothing orders events by id (``seq`` does)."""
    stamp = (time.time_ns() // 1_000_000).to_bytes(6, "big").hex()
    head = f"{stamp[:8]}-{stamp[8:]}-7"  # the time, then the version nibble
    # 10 random bytes (20 hex digits) per id: digits 1-3 are rand_a (12 bits); the low 2
    # bits of digit 4 under the variant bits 10 (8, 9, a or b), then digits 5-19, are
    # rand_b (62 bits); digit 0 is not used. Formatted from one hex string: the
    # per-id bytearray edits this replaces cost twice as much.
    h = os.urandom(10 * count).hex()
    return [
        f"{head}{h[k + 1 : k + 4]}-{_VARIANT[h[k + 4]]}{h[k + 5 : k + 8]}-{h[k + 8 : k + 20]}"
        for k in range(0, 20 * count, 20)
    ]


def _decode_metadata(raw: Any, event_id: str) -> dict[str, Any]:
    if raw is None or raw == "":
        return {}
    if isinstance(raw, dict):
        return dict(raw)
    if isinstance(raw, bytes | str):
        try:
            value = _DECODER.decode(raw)
        except msgspec.DecodeError as exc:
            raise CorruptRecordError(
                f"event {event_id!r}: field 'metadata' is not valid JSON ({exc})",
                data={"event_id": event_id, "field": "metadata"},
            ) from exc
        if value is None:
            return {}  # JSON ``null``: no metadata, like SQL NULL
        if not isinstance(value, dict):
            raise CorruptRecordError(
                f"event {event_id!r}: field 'metadata' must be a JSON object, "
                f"got {type(value).__name__}",
                data={"event_id": event_id, "field": "metadata"},
            )
        return value
    raise CorruptRecordError(
        f"event {event_id!r}: field 'metadata' must be a JSON string, got {type(raw).__name__}",
        data={"event_id": event_id, "field": "metadata"},
    )


def _tool_calls_from_json(raw: Any, event_id: str) -> list[ToolCall]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise CorruptRecordError(
            f"event {event_id!r}: metadata 'toolCalls' must be a list",
            data={"event_id": event_id, "field": "metadata.toolCalls"},
        )
    calls: list[ToolCall] = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise CorruptRecordError(
                f"event {event_id!r}: metadata 'toolCalls[{i}]' must be an object",
                data={"event_id": event_id, "field": f"metadata.toolCalls[{i}]"},
            )
        # Arguments read back exactly as they were stored: an object, or whatever else the
        # model sent (a JSON string, possibly malformed); the adapters render each form.
        args = item.get("arguments", {})
        call_id, name = item.get("id"), item.get("name")
        calls.append(
            ToolCall(
                id="" if call_id is None else str(call_id),
                name="" if name is None else str(name),
                arguments=args,
            )
        )
    return calls


def _int_from_json(raw: Any, event_id: str, key: str) -> int | None:
    if raw is None:
        return None
    if isinstance(raw, int | float) and not isinstance(raw, bool) and float(raw).is_integer():
        return int(raw)
    raise CorruptRecordError(
        f"event {event_id!r}: metadata {key!r} must be an integer, got {raw!r}",
        data={"event_id": event_id, "field": f"metadata.{key}"},
    )


def hydrate_event(row: dict[str, Any]) -> SessionEvent:
    """Turn a stored row into a ``SessionEvent``.

    NULL content reads as ``""``; an unknown action reads as ``user_message``; a
    tool_result's ``is_success`` is true only when the key is absent (or JSON ``null``,
    as the reference reads it); ``false`` is kept. Raises ``CorruptRecordError`` when the
    metadata is not a JSON object or a reference key has a value of the wrong type.
    """
    event_id = str(row.get("id", ""))
    meta = _decode_metadata(row.get("metadata"), event_id)
    raw_action = row.get("action")
    action: Action = raw_action if raw_action in ACTIONS else "user_message"
    content = row.get("content")
    event = SessionEvent(
        id=event_id,
        session_id=str(row.get("session_id", "")),
        seq=int(row.get("seq") or 0),
        timestamp=int(row.get("created_at") or 0),
        action=action,
        content="" if content is None else str(content),
        turn=row.get("turn"),
        token_count=row.get("token_count"),
    )
    own = OWN_METADATA_KEYS[action]
    if action == "agent_message" or action == "tool_call_request":
        model = meta.get("model")
        event.model = None if model is None else str(model)
    if action == "tool_call_request":
        event.tool_calls = _tool_calls_from_json(meta.get("toolCalls", []), event_id)
    elif action == "tool_result":
        call_id = meta.get("toolCallId")
        tool_name = meta.get("toolName")
        event.tool_call_id = None if call_id is None else str(call_id)
        event.tool_name = None if tool_name is None else str(tool_name)
        is_success = meta.get("isSuccess")
        event.is_success = True if is_success is None else bool(is_success)
    elif action == "compaction":
        event.compacted_event_count = _int_from_json(
            meta.get("compactedEventCount"), event_id, "compactedEventCount"
        )
        record = meta.get("compaction")
        event.compaction = record if isinstance(record, dict) else None
    if "reasoning" in own and isinstance(meta.get("reasoning"), str):
        event.reasoning = meta["reasoning"]
    if "images" in own and isinstance(meta.get("images"), list):
        event.images = [str(u) for u in meta["images"]]
    rest = {k: v for k, v in meta.items() if k not in own}
    if rest or (not meta and row.get("metadata") == "{}"):
        event.metadata = rest
    return event


def dehydrate_event(event: SessionEvent) -> dict[str, Any]:
    """Turn an event into a row (``metadata`` compact JSON, or ``None`` when nothing is set).

    An explicit empty ``metadata`` object is stored as ``"{}"``, never dropped.
    """
    return {
        "id": event.id,
        "session_id": event.session_id,
        "seq": event.seq,
        "action": event.action,
        "content": event.content,
        "metadata": event_metadata(event),
        "created_at": event.timestamp,
    }


def event_metadata(event: SessionEvent) -> str | None:
    """The ``metadata`` column of ``event``'s row (``dehydrate_event``'s rule), alone: what
    an append needs of the row beside the event's own fields."""
    meta: dict[str, Any] = dict(event.metadata) if event.metadata else {}
    action = event.action
    if action in ("agent_message", "tool_call_request") and event.model is not None:
        meta["model"] = event.model
    if action == "tool_call_request":
        meta["toolCalls"] = [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in event.tool_calls or []
        ]
    elif action == "tool_result":
        if event.tool_call_id is not None:
            meta["toolCallId"] = event.tool_call_id
        if event.tool_name is not None:
            meta["toolName"] = event.tool_name
        if event.is_success is not None:
            meta["isSuccess"] = event.is_success
    elif action == "compaction":
        if event.compacted_event_count is not None:
            meta["compactedEventCount"] = event.compacted_event_count
        if event.compaction is not None:
            meta["compaction"] = event.compaction
    own = OWN_METADATA_KEYS[action]
    if event.reasoning is not None and "reasoning" in own:
        meta["reasoning"] = event.reasoning
    if event.images and "images" in own:
        meta["images"] = event.images
    if meta:
        return encode_json(meta)
    return None if event.metadata is None else "{}"


def event_to_message(event: SessionEvent) -> ContextMessage | None:
    """Map an event to the message a model sees.

    ``system_instruction`` and ``compaction`` become system messages; a tool_result
    becomes a ``tool`` message named after its tool, with ``is_error`` when it failed.
    """
    action = event.action
    meta = event.metadata or None
    if action == "user_message":
        return ContextMessage(
            role="user", content=event.content, images=event.images, metadata=meta
        )
    if action == "agent_message":
        return ContextMessage(
            role="assistant",
            content=event.content,
            reasoning=event.reasoning,
            images=event.images,
            metadata=meta,
        )
    if action == "tool_call_request":
        return ContextMessage(
            role="assistant",
            content=event.content,
            tool_calls=list(event.tool_calls) if event.tool_calls else None,
            reasoning=event.reasoning,
            images=event.images,
            metadata=meta,
        )
    if action == "tool_result":
        return ContextMessage(
            role="tool",
            content=event.content,
            tool_call_id=event.tool_call_id,
            name=event.tool_name,
            images=event.images,
            is_error=event.is_success is False,
            metadata=meta,
        )
    # system_instruction and compaction
    return ContextMessage(role="system", content=event.content, metadata=meta)


_ROLE_ACTIONS: dict[str, Action] = {
    "system": "system_instruction",
    "user": "user_message",
    "tool": "tool_result",
}


def message_to_event(
    session_id: str,
    message: ContextMessage,
    event_id: str | None = None,
    *,
    timestamp: int | None = None,
) -> SessionEvent:
    """Map a message to a new event with a fresh unique id (``event_id`` when given) and
    the current time (``timestamp``, in ms, when given: the events of one turn share it).

    ``seq`` is a placeholder (0): the store assigns it. An assistant message with a
    non-empty ``tool_calls`` list becomes ``tool_call_request``; a ``tool`` message
    becomes ``tool_result`` with ``tool_name`` taken from ``name``.
    """
    role = message.role
    if role == "assistant":
        action: Action = "tool_call_request" if message.tool_calls else "agent_message"
    else:
        action = _ROLE_ACTIONS.get(role, "tool_result")
    # One constructor call with keywords, then the fields of the action: this runs for
    # every message persisted, and a shared dict unpacked into one call per action cost
    # as much as the event itself.
    event = SessionEvent(
        id=event_id or new_event_id(),
        session_id=session_id,
        timestamp=now_ms() if timestamp is None else timestamp,
        action=action,
        content=message.content,
        images=None if role == "system" else message.images,
        metadata=dict(message.metadata) if message.metadata is not None else None,
    )
    if action == "tool_call_request":
        event.tool_calls = list(message.tool_calls or ())
        event.reasoning = message.reasoning
    elif action == "agent_message":
        event.reasoning = message.reasoning
    elif action == "tool_result":
        event.tool_call_id = message.tool_call_id
        event.tool_name = message.name
        event.is_success = not message.is_error
    return event
