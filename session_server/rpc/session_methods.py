"""RPC methods that edit sessions beside the turn path (DESIGN §11 "Data").

``session.list`` (paged, filtered by metadata), ``session.update`` (replace metadata),
``events.pop`` (remove or rewrite the newest non-compaction event, atomically) and
``session.clear`` (delete every event, keep the session). Their rows are in
``rpc.table``.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Final

import msgspec
from pydantic import Field, PlainValidator, model_validator

from ..values.errors import InvalidParamsError, NotFoundError
from ..values.events import SessionEvent
from ..values.validation import parse_client_event
from .method_spec import CallContext, RpcParams
from .params import JsonObject, SessionId, SessionMetadata
from .protocol import INT64_MAX, INT64_MIN

__all__ = [
    "DEFAULT_PAGE",
    "MAX_FILTER_KEYS",
    "MAX_PAGE",
    "ClearParams",
    "ListParams",
    "PopParams",
    "UpdateParams",
    "events_pop",
    "session_clear",
    "session_list",
    "session_update",
]

MAX_PAGE: Final = 1000
DEFAULT_PAGE: Final = 100
MAX_FILTER_KEYS: Final = 64
"""Keys of a ``session.list`` metadata filter: one SQL condition each (SQLite refuses an
expression deeper than 1000; 700k keys failed with an internal error)."""


class ListParams(RpcParams):
    metadata: Annotated[JsonObject, Field(max_length=MAX_FILTER_KEYS)] | None = None
    limit: Annotated[int, Field(ge=1, le=MAX_PAGE)] = DEFAULT_PAGE
    offset: Annotated[int, Field(ge=0)] = 0
    cursor: Annotated[str, Field(min_length=1, max_length=1024)] | None = None
    # false: ``total`` is null and not counted (a count reads every matching session).
    count: bool = True


class UpdateParams(RpcParams):
    """``metadata`` and/or ``budget``: a field left out is left as it is; ``null``
    clears it."""

    session_id: SessionId
    metadata: SessionMetadata | None = None
    budget: JsonObject | None = None
    # true: set only the keys of ``metadata``, keep the others (one transaction).
    merge: bool = False

    @model_validator(mode="after")
    def _something(self) -> UpdateParams:
        if not {"metadata", "budget"} & self.model_fields_set:
            raise ValueError("give metadata, budget or both")
        return self


class PopParams(RpcParams):
    session_id: SessionId
    event_id: Annotated[str, Field(min_length=1)] | None = None
    replace_with: Annotated[
        SessionEvent | None,
        PlainValidator(lambda v: parse_client_event(v, "params.replace_with")),
    ] = None


class ClearParams(RpcParams):
    session_id: SessionId


async def session_list(ctx: CallContext, p: ListParams) -> dict[str, Any]:
    """One page of sessions, most recently updated first: ``{sessions, total,
    next_offset, next_cursor}`` (``total``: sessions matching; the next fields are
    ``null`` on the last page).

    ``metadata`` keeps the sessions whose metadata has each given key with exactly that
    value (strings, numbers, booleans, null). ``count: false`` answers ``total: null``
    and skips the count (it reads every matching session; a page reads only its own). A page holds ``limit`` sessions (default
    ``DEFAULT_PAGE``, at most ``MAX_PAGE``): the next one is asked with ``cursor:
    next_cursor`` (it resumes after the last session shown, so sessions created meanwhile
    shift nothing) or ``offset: next_offset``, not both. A token limited to sessions sees
    (and counts) only its own.
    """
    if p.cursor is not None and p.offset:
        raise InvalidParamsError(
            "cursor: give either cursor or offset, not both", data={"field": "cursor"}
        )
    only = None if ctx.grant is None else ctx.grant.sessions
    after = None if p.cursor is None else _decode_cursor(p.cursor)
    # One more than the page: whether a next page exists, without a second query.
    sessions, total = await (await ctx.actor()).list_sessions_page(
        metadata=p.metadata,
        limit=p.limit + 1,
        offset=p.offset,
        only=only,
        after=after,
        count=p.count,
    )
    more = len(sessions) > p.limit
    del sessions[p.limit :]
    end = p.offset + len(sessions)
    last = sessions[-1] if sessions else None
    further = more if total is None else end < total
    return {
        "sessions": sessions,
        "total": total,
        "next_offset": end if p.cursor is None and further else None,
        "next_cursor": _encode_cursor(last) if more and last is not None else None,
    }


def _encode_cursor(row: dict[str, Any]) -> str:
    """An opaque cursor naming the place of ``row`` in the order of ``session.list``."""
    raw = msgspec.json.encode([row["updated_at"], row["created_at"], row["id"]])
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def _decode_cursor(cursor: str) -> tuple[int, int, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        updated, created, session_id = msgspec.json.decode(raw, type=tuple[int, int, str])
        # A forged cursor's numbers must still bind as SQLite integers.
        if not (INT64_MIN <= updated <= INT64_MAX and INT64_MIN <= created <= INT64_MAX):
            raise ValueError("out of range")
        return updated, created, session_id
    except (binascii.Error, ValueError, msgspec.DecodeError):
        raise InvalidParamsError(
            "cursor: not a cursor this server gave (pass next_cursor unchanged)",
            data={"field": "cursor"},
        ) from None


async def session_update(ctx: CallContext, p: UpdateParams) -> dict[str, Any]:
    """Replace the session's metadata and/or budget (a field left out stays as it is,
    ``null`` clears it; ``merge: true`` sets only the given metadata keys); answer the
    session object."""
    actor = await ctx.actor()
    if "budget" in p.model_fields_set:
        await actor.set_session_budget(p.session_id, p.budget)
    if "metadata" in p.model_fields_set:
        await actor.update_session(p.session_id, p.metadata, merge=p.merge)
    row = await actor.get_session(p.session_id)
    if row is None:
        raise NotFoundError.session(p.session_id)
    return {**row, "session_id": p.session_id}


async def events_pop(ctx: CallContext, p: PopParams) -> dict[str, Any]:
    """Remove the newest event that is not a compaction record, or rewrite it in place
    with ``replace_with``; ``{event, replaced}`` (``event`` as it was, ``null`` if none).
    ``event_id``: pop only if the newest event is that one (conflict otherwise)."""
    event = await (await ctx.actor()).pop_event(
        p.session_id, event_id=p.event_id, replace_with=p.replace_with
    )
    return {"event": event, "replaced": event is not None and p.replace_with is not None}


async def session_clear(ctx: CallContext, p: ClearParams) -> dict[str, Any]:
    """Delete every event of the session in one transaction; the session, its metadata and
    strategy stay. ``{deleted}``."""
    return {"deleted": await (await ctx.actor()).clear_session(p.session_id)}
