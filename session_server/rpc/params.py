"""The params models of the session and event methods, and the field types the RPC
methods share (``SessionId``, ``Events``, ``Messages``, ``JsonObject``, ``Instructions``).

Each model refuses unknown fields and does not coerce across JSON types (``RpcParams``);
events and messages are checked by ``values.validation`` as they are validated. One
model per method: the hot path (``turn.persist``) too is validated by its model.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

import msgspec
from pydantic import AfterValidator, Field, PlainValidator

from ..values.errors import InvalidParamsError
from ..values.events import Action, ContextMessage, SessionEvent
from ..values.metadata_merge import MAX_SESSION_METADATA_BYTES
from ..values.validation import parse_client_events, parse_client_messages
from .method_spec import RpcParams

__all__ = [
    "MAX_AGENTS_PAGE",
    "MAX_EVENT_IDS",
    "MAX_INSTRUCTIONS",
    "MAX_SESSION_METADATA_BYTES",
    "MAX_WRITE_ITEMS",
    "AgentsListParams",
    "AppendParams",
    "BuildParams",
    "CreateSessionParams",
    "DeleteEventsParams",
    "Events",
    "Instructions",
    "JsonObject",
    "LoadParams",
    "Messages",
    "NoParams",
    "PersistParams",
    "SessionId",
    "SessionMetadata",
    "SessionParams",
    "SubscribeParams",
]

SessionId = Annotated[str, Field(min_length=1, max_length=256)]
MAX_WRITE_ITEMS: Final = 10_000
"""Events one ``events.append`` or messages one ``turn.persist`` writes: the commit's
bookkeeping (the recent-events cache, the answer's seqs) runs on the event loop, linear
in the items, so 100k small ones held it 250 to 450 ms; their size is bounded by the
frame."""


def _items(value: Any, where: str) -> Any:
    if isinstance(value, list) and len(value) > MAX_WRITE_ITEMS:
        raise InvalidParamsError(
            f"{where}: at most {MAX_WRITE_ITEMS} items per request, not {len(value)} "
            "(split them: each request is one atomic write)",
            data={"field": where, "max_items": MAX_WRITE_ITEMS},
        )
    return value


Events = Annotated[
    list[SessionEvent],
    PlainValidator(lambda v: parse_client_events(_items(v, "params.events"), "params.events")),
]
Messages = Annotated[
    list[ContextMessage],
    PlainValidator(
        lambda v: parse_client_messages(_items(v, "params.messages"), "params.messages")
    ),
]
JsonObject = dict[str, Any]


MAX_INSTRUCTIONS: Final = 1024
"""System instructions a request may give: each is counted (and its count looked up)
on the event loop, so 1.5 million short ones held it 1.9 s; their size is bounded by
the frame."""

MAX_EVENT_IDS: Final = 10_000
"""Event ids one ``events.delete`` names (one SQL statement binds them all: SQLite
takes at most 32,766 values)."""


def _instructions(value: Any) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and len(value) > MAX_INSTRUCTIONS:
        raise InvalidParamsError(
            f"params.system_instructions: at most {MAX_INSTRUCTIONS} strings, not "
            f"{len(value)} (join them)",
            data={"field": "params.system_instructions", "max_items": MAX_INSTRUCTIONS},
        )
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise InvalidParamsError(
        "params.system_instructions: must be a string or a list of strings",
        data={"field": "params.system_instructions"},
    )


Instructions = Annotated[list[str] | None, PlainValidator(_instructions)]


def _session_metadata(value: dict[str, Any]) -> dict[str, Any]:
    size = len(msgspec.json.encode(value))
    if size > MAX_SESSION_METADATA_BYTES:
        raise InvalidParamsError(
            f"params.metadata: {size} bytes of JSON, more than the "
            f"{MAX_SESSION_METADATA_BYTES} a session's metadata may hold (keep large data "
            "in events)",
            data={"field": "params.metadata", "max_bytes": MAX_SESSION_METADATA_BYTES},
        )
    return value


SessionMetadata = Annotated[JsonObject, AfterValidator(_session_metadata)]


class SessionParams(RpcParams):
    session_id: SessionId


class CreateSessionParams(RpcParams):
    metadata: SessionMetadata | None = None
    session_id: SessionId | None = None
    # "return": an existing session_id answers that session (get-or-create).
    if_exists: Literal["error", "return"] = "error"


class NoParams(RpcParams):
    pass


class AppendParams(RpcParams):
    session_id: SessionId
    events: Events
    expected_last_seq: Annotated[int, Field(ge=0)] | None = None
    idempotency_key: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    # The provider's usage of the appended events, stored with the last (as turn.persist's).
    usage: JsonObject | None = None
    model: Annotated[str, Field(min_length=1, max_length=256)] | None = None


class LoadParams(RpcParams):
    session_id: SessionId
    limit: Annotated[int, Field(ge=1)] | None = 50
    tail: bool = True
    since: Annotated[int, Field(ge=0)] | None = None
    after_seq: Annotated[int, Field(ge=0)] | None = None
    # Distinct: each is one SQL value, and duplicates select nothing more.
    actions: Annotated[list[Action], AfterValidator(lambda v: list(dict.fromkeys(v)))] | None = None


class DeleteEventsParams(RpcParams):
    session_id: SessionId
    event_ids: Annotated[list[Annotated[str, Field(min_length=1)]], Field(max_length=MAX_EVENT_IDS)]


class BuildParams(RpcParams):
    session_id: SessionId
    system_instructions: Instructions = None
    limit: Annotated[int, Field(ge=1)] | None = None
    strategy: JsonObject | None = None
    override_budget: bool = False


class SubscribeParams(RpcParams):
    session_id: SessionId
    after_seq: Annotated[int, Field(ge=0)] | None = None
    stream_cursor: Annotated[int, Field(ge=0)] | None = None


class PersistParams(RpcParams):
    session_id: SessionId
    messages: Messages
    base_seq: Annotated[int, Field(ge=0)] | None = None
    idempotency_key: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    usage: JsonObject | None = None
    strategy: JsonObject | None = None
    model: Annotated[str, Field(min_length=1, max_length=256)] | None = None


MAX_AGENTS_PAGE = 1000


class AgentsListParams(RpcParams):
    after: Annotated[str, Field(min_length=1, max_length=1024)] | None = None
    limit: Annotated[int, Field(ge=1, le=MAX_AGENTS_PAGE)] = MAX_AGENTS_PAGE
