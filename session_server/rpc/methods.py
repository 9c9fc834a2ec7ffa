"""The session and event RPC methods: one async handler per method (its params model
in ``params``).

The handlers of the session and event methods are here, those over compaction, views and
export in ``memory_methods``; the one table of every method the server answers is
``rpc.table.BUILTIN_METHODS``, passed to ``SessionServer`` (``methods=``). Adding a
method is a params model, a handler and one row in that table::

    class EchoParams(RpcParams):
        text: str

    async def debug_echo(ctx: CallContext, p: EchoParams) -> dict[str, Any]:
        return {"text": p.text}

    MethodSpec("debug.echo", EchoParams, debug_echo, scope="read")  # agent endpoint

Every row names the token ``scope`` the method needs and how it meets a token limited
to sessions (``method_spec``: ``RpcParams``, ``CallContext``, ``MethodSpec``,
``method_table``); ``dispatch`` (``rpc.dispatch``) runs a request against the table. The
params models of these methods and the shared field types are in ``params``. Every name
of those modules that was once defined here is still importable from here.

This module does no I/O itself; it never imports ``asyncio`` or ``websockets``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

from ..core.decisions import LARGE_WINDOW_EVENTS
from ..values.cluster_view import ClusterMember
from ..values.context import WorkingContext
from ..values.errors import ConflictError, InvalidParamsError, NotFoundError, TooLargeError
from .method_spec import (
    CallContext,
)
from .params import (
    AgentsListParams,
    AppendParams,
    BuildParams,
    CreateSessionParams,
    DeleteEventsParams,
    LoadParams,
    PersistParams,
    SessionParams,
    SubscribeParams,
)

if TYPE_CHECKING:
    from ..runtime.actor import AgentActor
    from ..values.plans import AppendResult

__all__ = [
    "agents_list",
    "context_build",
    "events_append",
    "events_delete",
    "events_load",
    "events_subscribe",
    "events_unsubscribe",
    "session_create",
    "session_delete",
    "session_get",
    "turn_persist",
]


def _append_result(result: Any) -> dict[str, Any]:
    return {
        "seqs": list(result.seqs),
        "last_seq": result.last_seq,
        "compaction_required": bool(getattr(result, "compaction_required", False)),
    }


async def _session_row(actor: AgentActor, session_id: str) -> dict[str, Any]:
    row = await actor.get_session(session_id)
    if row is None:
        raise NotFoundError.session(session_id)
    return row


async def session_create(ctx: CallContext, p: CreateSessionParams) -> dict[str, Any]:
    """Create a session; answer the session object plus ``session_id`` and ``created``.

    An existing ``session_id`` is a conflict, or with ``if_exists: "return"`` answers the
    existing session unchanged (``created: false``; ``metadata`` is not applied to it).
    """
    actor = await ctx.actor()
    while True:
        try:
            sid = await actor.create_session(metadata=p.metadata, session_id=p.session_id)
            break
        except ConflictError:
            if p.if_exists != "return" or p.session_id is None:
                raise
            existing = await actor.get_session(p.session_id)
            if existing is not None:  # else deleted between the two calls: create it
                return {**existing, "session_id": p.session_id, "created": False}
    row = await actor.get_session(sid)
    return {**(row or {"id": sid}), "session_id": sid, "created": True}


async def session_get(ctx: CallContext, p: SessionParams) -> dict[str, Any]:
    return await _session_row(await ctx.actor(), p.session_id)


async def session_delete(ctx: CallContext, p: SessionParams) -> dict[str, Any]:
    deleted = await (await ctx.actor()).delete_session(p.session_id)
    if deleted:
        ctx.connection.unsubscribe(p.session_id)
    return {"deleted": deleted}


async def events_append(ctx: CallContext, p: AppendParams) -> dict[str, Any]:
    for i, ev in enumerate(p.events):
        if ev.session_id and ev.session_id != p.session_id:
            raise InvalidParamsError(
                f"params.events[{i}].session_id: differs from params.session_id",
                data={"field": f"params.events[{i}].session_id"},
            )
    result = await (await ctx.actor()).append_events(
        p.session_id,
        p.events,
        expected_last_seq=p.expected_last_seq,
        idempotency_key=p.idempotency_key,
        usage=p.usage,
        model=p.model,
    )
    answer = _append_result(result)
    if p.usage is not None:  # as turn.persist answers: the usage may pass a budget
        answer["budget_exceeded"] = result.budget_exceeded
    return answer


async def events_load(ctx: CallContext, p: LoadParams) -> dict[str, Any]:
    """Events oldest first; an unknown session is -32001 (as for every other method).

    Memory stays bounded whatever the limit (none, on a 200k-event session): SQLite
    sums the events' sizes first, and an answer that would pass ``max_answer_bytes`` is
    refused (-32004) before its rows are read.
    """
    actor = await ctx.actor()
    events, complete = await actor.load_events_bounded(
        p.session_id,
        max_bytes=ctx.max_answer_bytes,
        partial=False,
        limit=p.limit,
        tail=p.tail,
        since=p.since,
        after_seq=p.after_seq,
        actions=p.actions,
    )
    if not complete:  # no rows were read
        raise TooLargeError(
            f"limit: the events asked for are more than the {ctx.max_answer_bytes} bytes "
            "an answer may hold (max_answer_bytes); ask for fewer with limit, or page "
            "with after_seq",
            data={"field": "limit", "max_answer_bytes": ctx.max_answer_bytes},
        )
    if not events:
        await _session_row(actor, p.session_id)  # only an empty answer needs the check
    return {"events": events}


async def events_delete(ctx: CallContext, p: DeleteEventsParams) -> dict[str, Any]:
    return {"deleted": await (await ctx.actor()).delete_events(p.session_id, p.event_ids)}


async def context_build(ctx: CallContext, p: BuildParams) -> dict[str, Any]:
    wc = await (await ctx.actor()).build_working_context(
        p.session_id,
        system_instructions=p.system_instructions,
        limit=p.limit,
        strategy=p.strategy,
        may_compact=ctx.may_write,
        override_budget=p.override_budget,
    )
    if len(wc.messages) >= LARGE_WINDOW_EVENTS:  # freed on a worker once answered
        # Imported here: the runtime uses asyncio, which this module does not import.
        from ..runtime.off_loop import release_after_response

        release_after_response(ctx.registry.executor, ctx.after_response, wc.messages)
    return {
        "system_instructions": wc.system_instructions,
        "messages": wc.messages,
        "base_seq": wc.base_seq,
        "token_count": wc.token_count,
        "omitted_events": wc.omitted_events,
    }


@functools.cache
def _persist_from_wire() -> Callable[..., Coroutine[Any, Any, AppendResult]]:
    """The actor's wire entry for a turn (``runtime.actor.persist_from_wire``),
    imported on first use: importing this module loads no event loop (the client
    imports the framing without the runtime)."""
    from ..runtime.actor import persist_from_wire

    return persist_from_wire


async def turn_persist(ctx: CallContext, p: PersistParams) -> dict[str, Any]:
    """Persist the messages of one turn atomically. With ``base_seq`` the session must not
    have moved past it (conflict otherwise); without it the turn is appended."""
    wc = WorkingContext(base_seq=p.base_seq or 0)
    wc.add_messages(p.messages)
    try:
        result = await _persist_from_wire()(
            await ctx.actor(),
            p.session_id,
            wc,
            idempotency_key=p.idempotency_key,
            usage=p.usage,
            on_conflict="reject" if p.base_seq is not None else "append",
            strategy=p.strategy,
            content_bound=ctx.frame_bytes,
            model=p.model,
        )
    except ConflictError as exc:
        # The store checks an expected seq; the caller sent it as ``base_seq``.
        if not exc.data or exc.data.get("field") != "expected_last_seq":
            raise
        last_seq = exc.data.get("last_seq")
        raise ConflictError(
            f"base_seq: session {p.session_id!r} is at seq {last_seq}, not {p.base_seq} "
            "(build the context again, or persist without base_seq to append)",
            data={**exc.data, "field": "base_seq"},
        ) from exc
    return {**_append_result(result), "budget_exceeded": result.budget_exceeded}


async def events_subscribe(ctx: CallContext, p: SubscribeParams) -> dict[str, Any]:
    """Notifications (``events.appended``) follow for every event with seq > ``last_seq``;
    with ``after_seq`` the events after it are sent first (resume after a reconnect: no
    gap, no duplicate). ``session.deleted {session_id}`` ends the subscription when the
    session is deleted. Live turns: ``stream.chunk`` notifications of the stream in
    progress (the chunks after ``stream_cursor``, by default all of them, then live ones)
    and ``stream.closed`` after the turn's stored events; ``stream`` in the answer is the
    stream in progress (``{stream_id, generation, cursor}``) or null."""
    actor = await ctx.actor()
    last_seq = await ctx.connection.subscribe(
        ctx, actor, p.session_id, after_seq=p.after_seq, stream_cursor=p.stream_cursor
    )
    answer: dict[str, Any] = {"session_id": p.session_id, "last_seq": last_seq}
    stream = actor.streams.current(p.session_id)
    answer["stream"] = (
        None
        if stream is None
        else {
            "stream_id": stream.stream_id,
            "generation": stream.generation,
            "cursor": stream.last_cursor,
        }
    )
    return answer


async def events_unsubscribe(ctx: CallContext, p: SessionParams) -> dict[str, Any]:
    return {"unsubscribed": ctx.connection.unsubscribe(p.session_id)}


async def agents_list(ctx: CallContext, p: AgentsListParams) -> dict[str, Any]:
    """A page of agent ids with a folder on disk (in cluster mode, also every agent some
    node claimed), sorted: those after ``after`` (a cursor:
    any string), at most ``limit``; ``next_after`` (the last id) only when more follow. A
    restricted token sees only its agents. The folder listing runs on a worker thread."""
    agents = await ctx.registry.list_agents_async()
    member = ctx.registry.turn_logs
    if isinstance(member, ClusterMember):  # cluster mode: every node's agents
        agents = sorted(set(agents).union(await member.agent_ids()))
    visible = [a for a in agents if (p.after is None or a > p.after) and ctx.permits(a)]
    page = visible[: p.limit]
    answer: dict[str, Any] = {"agents": page}
    if len(visible) > p.limit:
        answer["next_after"] = page[-1]
    return answer
