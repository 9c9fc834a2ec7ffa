"""Live turns over RPC: ``stream.open``, ``stream.append``, ``stream.close`` (handlers and
params models; the actor's ``runtime.live_streams`` does the work, the rules are
``values.streams``). ``events.subscribe {stream_cursor}`` is in ``methods``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field

from ..values.errors import ForbiddenError
from .method_spec import CallContext, RpcParams
from .params import JsonObject, Messages, SessionId

if TYPE_CHECKING:
    from ..runtime.actor import AgentActor

__all__ = [
    "StreamAppendParams",
    "StreamCloseParams",
    "StreamOpenParams",
    "StreamTurn",
    "stream_append",
    "stream_close",
    "stream_open",
]

StreamId = Annotated[str, Field(min_length=1, max_length=64)]
Generation = Annotated[int, Field(ge=1)]


class StreamOpenParams(RpcParams):
    session_id: SessionId
    base_seq: Annotated[int, Field(ge=0)] | None = None


class StreamAppendParams(RpcParams):
    stream_id: StreamId
    generation: Generation
    # Each chunk is checked (and bounded) by ``values.streams.encode_chunks``.
    chunks: list[Any]
    after_cursor: Annotated[int, Field(ge=0)] | None = None


class StreamTurn(RpcParams):
    messages: Messages
    idempotency_key: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    usage: JsonObject | None = None


class StreamCloseParams(RpcParams):
    stream_id: StreamId
    generation: Generation
    turn: StreamTurn | None = None


async def stream_open(ctx: CallContext, p: StreamOpenParams) -> dict[str, Any]:
    """Open the session's stream (or take it over: a higher generation fences the
    older producer); ``{stream_id, generation, cursor, base_seq}``."""
    actor = await ctx.actor()
    return await actor.stream_open(p.session_id, base_seq=p.base_seq, owner=ctx.connection)


async def _stream_actor(ctx: CallContext, stream_id: str) -> AgentActor:
    """The agent, once a token limited to sessions is known to hold the stream's."""
    actor = await ctx.actor()
    if ctx.grant is not None:
        await actor.streams.load(actor)
        session_id = actor.streams.session_of(stream_id)
        if session_id is not None and not ctx.permits_session(session_id):
            raise ForbiddenError(
                f"stream_id: this token may not address the session of stream {stream_id!r}",
                data={"field": "stream_id"},
            )
    return actor


async def stream_append(ctx: CallContext, p: StreamAppendParams) -> dict[str, Any]:
    """Store chunks; ``{cursor}`` (the last chunk's) once they are committed."""
    actor = await _stream_actor(ctx, p.stream_id)
    return await actor.stream_append(
        p.stream_id, p.generation, p.chunks, after_cursor=p.after_cursor
    )


async def stream_close(ctx: CallContext, p: StreamCloseParams) -> dict[str, Any]:
    """With ``turn``: the ``turn.persist`` answer (the turn and the end of the stream in
    one transaction); without: ``{abandoned: true}``."""
    actor = await _stream_actor(ctx, p.stream_id)
    turn = p.turn
    result = await actor.streams.close(
        actor,
        p.stream_id,
        p.generation,
        None if turn is None else turn.messages,
        idempotency_key=None if turn is None else turn.idempotency_key,
        usage=None if turn is None else turn.usage,
        validated=True,
    )
    if result is None:
        return {"abandoned": True}
    return {
        "seqs": list(result.seqs),
        "last_seq": result.last_seq,
        "compaction_required": bool(result.compaction_required),
    }
