"""RPC methods that edit sessions beside the turn path (DESIGN §11 "Data").

``session.list`` (paged, filtered by metadata), ``session.update`` (replace metadata),
``events.pop`` (remove or rewrite the newest non-compaction event, atomically) and
``session.clear`` (delete every event, keep the session). Their rows are in
``rpc.table``.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, PlainValidator

from ..core.events import SessionEvent
from ..core.validation import parse_event
from .methods import CallContext, JsonObject, RpcParams, SessionId

__all__ = [
    "ClearParams",
    "ListParams",
    "PopParams",
    "UpdateParams",
    "events_pop",
    "session_clear",
    "session_list",
    "session_update",
]

MAX_PAGE = 1000


class ListParams(RpcParams):
    metadata: JsonObject | None = None
    limit: Annotated[int, Field(ge=1, le=MAX_PAGE)] | None = None
    offset: Annotated[int, Field(ge=0)] = 0


class UpdateParams(RpcParams):
    session_id: SessionId
    metadata: JsonObject | None


class PopParams(RpcParams):
    session_id: SessionId
    event_id: Annotated[str, Field(min_length=1)] | None = None
    replace_with: Annotated[
        SessionEvent | None, PlainValidator(lambda v: parse_event(v, "params.replace_with"))
    ] = None


class ClearParams(RpcParams):
    session_id: SessionId


async def session_list(ctx: CallContext, p: ListParams) -> dict[str, Any]:
    """Sessions, most recently updated first: ``{sessions}``, and with ``limit`` also
    ``total`` (sessions matching) and ``next_offset`` (``null`` on the last page).

    ``metadata`` keeps the sessions whose metadata has each given key with exactly that
    value (strings, numbers, booleans, null); ``limit``/``offset`` page through them. A
    token limited to sessions sees (and counts) only its own. Without params: every
    session.
    """
    only = None if ctx.grant is None else ctx.grant.sessions
    sessions, total = await (await ctx.actor()).list_sessions_page(
        metadata=p.metadata, limit=p.limit, offset=p.offset, only=only
    )
    if p.limit is None:
        return {"sessions": sessions}
    end = p.offset + len(sessions)
    return {"sessions": sessions, "total": total, "next_offset": end if end < total else None}


async def session_update(ctx: CallContext, p: UpdateParams) -> dict[str, Any]:
    """Replace the session's metadata (``null`` clears it); answer the session object."""
    row = await (await ctx.actor()).update_session(p.session_id, p.metadata)
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
