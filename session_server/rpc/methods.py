"""RPC methods: one pydantic params model and one async handler per method.

The handlers of the session and event methods are here, those over compaction, views and
export in ``memory_methods``; the one table of every method the server answers is
``rpc.table.BUILTIN_METHODS``, passed to ``SessionServer`` (``methods=``). Adding a
method is a params model, a handler and one row in that table::

    class EchoParams(RpcParams):
        text: str

    async def debug_echo(ctx: CallContext, p: EchoParams) -> dict[str, Any]:
        return {"text": p.text}

    MethodSpec("debug.echo", EchoParams, debug_echo, scope="read")  # agent endpoint

Every row names the token ``scope`` the method needs (``read``: changes nothing;
``write``: appends, persists, compaction, session create/update; ``admin``: deletes,
import, backup, cross-agent methods); a row without one is a ``TypeError``. ``dispatch``
refuses a call whose token lacks the scope (-32003) before looking at the params. A token
limited to sessions may only call a method whose params name one of its sessions in
``session_id`` (``sessions="param"``, the default when the params model has that field);
``sessions="filter"`` marks a method that filters its own result by
``ctx.permits_session``, ``sessions="none"`` one that touches no session data. Any other
method is refused to such a token (``"deny"``, the default without ``session_id``).

Handlers take ``(ctx, params)``: ``ctx.actor()``
gives the ``AgentActor`` of the connection's agent (agent endpoint), ``ctx.registry`` the
registry, ``ctx.permits(agent_id)`` says whether the connection's token may address an
agent, ``ctx.connection`` the connection (subscriptions). Results are plain JSON values
(``msgspec.Struct`` values inside them are encoded as objects).

``dispatch`` validates params (nothing is written when validation fails), runs the handler
and turns every outcome into a response dict (``None`` for notifications). This module does
no I/O itself; it never imports ``asyncio`` or ``websockets``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, Protocol

import pydantic
from pydantic import ConfigDict, Field, PlainValidator

from ..auth import Grant, Scope, scope_allows
from ..core.context import WorkingContext
from ..core.errors import (
    ConflictError,
    ForbiddenError,
    InternalError,
    InvalidParamsError,
    MethodNotFoundError,
    NotFoundError,
    SessionServerError,
    TooLargeError,
)
from ..core.events import Action, ContextMessage, SessionEvent
from ..core.validation import parse_client_events, parse_client_messages
from .protocol import (
    Invalid,
    Request,
    error_response,
    find_out_of_range_int,
    format_validation_error,
    result_response,
    validation_error_field,
)

if TYPE_CHECKING:
    from ..runtime.actor import AgentActor
    from ..runtime.registry import ActorRegistry

__all__ = [
    "AGENT",
    "SERVER",
    "CallContext",
    "ConnectionLike",
    "Endpoint",
    "MethodSpec",
    "Observer",
    "RpcParams",
    "SessionRule",
    "dispatch",
    "method_table",
]

log = logging.getLogger("session_server.rpc")

Endpoint = Literal["agent", "server"]
# How a method meets a token limited to sessions (see the module docstring).
SessionRule = Literal["param", "filter", "none", "deny"]
AGENT: Endpoint = "agent"
SERVER: Endpoint = "server"

Handler = Callable[["CallContext", Any], Awaitable[Any]]
Observer = Callable[[str, str, float], None]


class RpcParams(pydantic.BaseModel):
    """Base of every params model: unknown fields are refused, values are not coerced
    across JSON types (``"5"`` is not an integer)."""

    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, arbitrary_types_allowed=True
    )


class ConnectionLike(Protocol):
    """What handlers may ask of the connection a request arrived on."""

    async def subscribe(
        self, ctx: CallContext, actor: AgentActor, session_id: str, after_seq: int | None = None
    ) -> int:
        """Start ``events.appended`` notifications for ``session_id`` (first the events
        after ``after_seq``, when given); return its last seq."""
        ...

    def unsubscribe(self, session_id: str) -> bool:
        """Stop notifications for ``session_id``; false when there was no subscription."""
        ...


@dataclass(slots=True)
class CallContext:
    """Per-request context handed to handlers.

    ``grant`` is the token grant of the connection (``None`` when auth is off);
    ``after_response`` callbacks run right after the response is queued for sending.
    """

    registry: ActorRegistry
    agent_id: str | None
    connection: ConnectionLike
    grant: Grant | None = None
    after: list[Callable[[], None]] = field(default_factory=list)
    # The most an answer may hold (the server's ``max_answer_bytes``); methods that
    # could gather more stop reading at it (``None``: no bound, in-process callers).
    max_answer_bytes: int | None = None
    creates_agent: bool = False  # set by ``dispatch`` from the method's row

    async def actor(self) -> AgentActor:
        """The connection's agent; ``NotFoundError`` when it has no store and the method
        is not one that creates agents (``MethodSpec.creates_agent``)."""
        if self.agent_id is None:
            raise MethodNotFoundError("this method needs an agent endpoint (/v1/agents/<id>)")
        return await self.registry.get(self.agent_id, create=self.creates_agent)

    def permits(self, agent_id: str) -> bool:
        return self.grant is None or self.grant.permits(agent_id)

    def permits_session(self, session_id: str) -> bool:
        """True when the connection's token may address ``session_id``."""
        return self.grant is None or self.grant.permits_session(session_id)

    @property
    def may_write(self) -> bool:
        """False for a read-scoped token: a build then applies the latest compaction record
        but never appends one."""
        return self.grant is None or self.grant.allows("write")

    def after_response(self, callback: Callable[[], None]) -> None:
        self.after.append(callback)


@dataclass(frozen=True, slots=True)
class MethodSpec:
    """One row of the method table: the name, its params model, its handler, the
    endpoint that answers it, the token ``scope`` it needs (required) and how it meets a
    token limited to sessions (``sessions``; derived from the params when not given).
    ``creates_agent``: the method may make a new agent (its folder and store); every other
    method answers -32001 for an agent that has none, and creates nothing."""

    name: str
    params: type[RpcParams]
    handler: Handler
    endpoint: Endpoint = AGENT
    scope: Scope = field(kw_only=True)
    sessions: SessionRule = field(default="deny", kw_only=True)
    creates_agent: bool = field(default=False, kw_only=True)
    # A shortcut for the hot path: the params of a request that is plainly valid, or
    # ``None`` (the model then decides, and words any refusal). It must accept nothing
    # the model refuses and give what the model would.
    fast: Callable[[dict[str, Any]], RpcParams | None] | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        has_session = "session_id" in self.params.model_fields
        if self.sessions == "param" and not has_session:
            raise ValueError(f"RPC method {self.name!r}: sessions='param' needs a session_id")
        if self.sessions == "deny" and has_session:
            object.__setattr__(self, "sessions", "param")


def method_table(*groups: Iterable[MethodSpec]) -> dict[str, MethodSpec]:
    """One table from rows; ``ValueError`` when a name appears twice."""
    table: dict[str, MethodSpec] = {}
    for group in groups:
        for spec in group:
            if spec.name in table:
                raise ValueError(f"RPC method {spec.name!r} is in the table twice")
            table[spec.name] = spec
    return table


async def dispatch(
    item: Request | Invalid,
    ctx: CallContext,
    endpoint: Endpoint,
    methods: Mapping[str, MethodSpec],
    observe: Observer | None = None,
) -> dict[str, Any] | None:
    """Run one request against ``methods``; return its response dict, or ``None`` for a
    notification.

    ``observe(method, code, seconds)``, when given, is called once per item with the
    method name (``unknown`` when it names no method, ``invalid`` for an unusable item:
    the label set stays bounded whatever clients send), ``ok`` or the JSON-RPC error code,
    and the time taken.
    """
    if isinstance(item, Invalid):
        if observe is not None:
            observe("invalid", str(item.error.code), 0.0)
        return None if item.notification else error_response(item.id, item.error)
    started = time.perf_counter()
    error: SessionServerError | None = None
    try:
        result = await _call(item, ctx, endpoint, methods)
    except SessionServerError as exc:
        error = exc
    except Exception:
        log.exception("internal error in %s (request id %r)", item.method, item.id)
        error = InternalError("Internal error")
    if observe is not None:
        label = item.method if item.method in methods else "unknown"
        observe(label, "ok" if error is None else str(error.code), time.perf_counter() - started)
    if item.notification:
        return None
    if error is not None:
        return error_response(item.id, error)
    return result_response(item.id, result)


async def _call(
    req: Request, ctx: CallContext, endpoint: Endpoint, table: Mapping[str, MethodSpec]
) -> Any:
    spec = table.get(req.method)
    if spec is None:
        raise MethodNotFoundError(f"Method not found: {req.method!r}")
    if spec.endpoint != endpoint:
        where = "/v1" if spec.endpoint == SERVER else "/v1/agents/<agent_id>"
        raise MethodNotFoundError(
            f"Method not found: {req.method!r} is not available on this endpoint (use {where})"
        )
    too_big = find_out_of_range_int(req.params)
    if too_big is not None:
        raise InvalidParamsError(
            f"{too_big}: integer out of range (must fit in a signed 64-bit integer)",
            data={"field": too_big},
        )
    grant = ctx.grant
    if grant is not None and not scope_allows(grant.scope, spec.scope):
        raise ForbiddenError(
            f"token.scope: {req.method!r} needs scope {spec.scope!r}, this token has "
            f"{grant.scope!r}",
            data={"field": "token.scope", "required": spec.scope, "scope": grant.scope},
        )
    if grant is not None and grant.sessions is not None:
        _check_sessions(spec, req.params, grant)
    ctx.creates_agent = spec.creates_agent
    params = None if spec.fast is None else spec.fast(req.params)
    if params is not None:
        return await spec.handler(ctx, params)
    try:
        params = spec.params.model_validate(req.params)
    except pydantic.ValidationError as exc:
        raise InvalidParamsError(
            format_validation_error(exc), data={"field": validation_error_field(exc)}
        ) from exc
    return await spec.handler(ctx, params)


def _check_sessions(spec: MethodSpec, params: dict[str, Any], grant: Grant) -> None:
    """Refuse a call of a token limited to sessions that reaches beyond them (checked on
    the raw params, before validation: a refusal does not depend on the other params)."""
    if spec.sessions in ("filter", "none"):
        return
    if spec.sessions == "deny":
        raise ForbiddenError(
            f"token.sessions: {spec.name!r} is not available to a token limited to sessions",
            data={"field": "token.sessions"},
        )
    session_id = params.get("session_id")
    if not isinstance(session_id, str):
        raise ForbiddenError(
            "params.session_id: a token limited to sessions must name one of them",
            data={"field": "params.session_id"},
        )
    if not grant.permits_session(session_id):
        raise ForbiddenError(
            f"params.session_id: this token may not address session {session_id[:256]!r}",
            data={"field": "params.session_id"},
        )


# ---------------------------------------------------------------------------- params types

SessionId = Annotated[str, Field(min_length=1, max_length=256)]
Events = Annotated[
    list[SessionEvent], PlainValidator(lambda v: parse_client_events(v, "params.events"))
]
Messages = Annotated[
    list[ContextMessage], PlainValidator(lambda v: parse_client_messages(v, "params.messages"))
]
JsonObject = dict[str, Any]


def _instructions(value: Any) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise InvalidParamsError(
        "params.system_instructions: must be a string or a list of strings",
        data={"field": "params.system_instructions"},
    )


Instructions = Annotated[list[str] | None, PlainValidator(_instructions)]


class SessionParams(RpcParams):
    session_id: SessionId


class CreateSessionParams(RpcParams):
    metadata: JsonObject | None = None
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


class LoadParams(RpcParams):
    session_id: SessionId
    limit: Annotated[int, Field(ge=1)] | None = 50
    tail: bool = True
    since: Annotated[int, Field(ge=0)] | None = None
    after_seq: Annotated[int, Field(ge=0)] | None = None
    actions: list[Action] | None = None


class DeleteEventsParams(RpcParams):
    session_id: SessionId
    event_ids: list[Annotated[str, Field(min_length=1)]]


class BuildParams(RpcParams):
    session_id: SessionId
    system_instructions: Instructions = None
    limit: Annotated[int, Field(ge=1)] | None = None
    strategy: JsonObject | None = None


class SubscribeParams(RpcParams):
    session_id: SessionId
    after_seq: Annotated[int, Field(ge=0)] | None = None


class PersistParams(RpcParams):
    session_id: SessionId
    messages: Messages
    base_seq: Annotated[int, Field(ge=0)] | None = None
    idempotency_key: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    usage: JsonObject | None = None
    strategy: JsonObject | None = None


def _short_str(value: Any) -> bool:
    return type(value) is str and 1 <= len(value) <= 256


def persist_params_fast(raw: dict[str, Any]) -> PersistParams | None:
    """``PersistParams`` of a plainly valid ``turn.persist`` without the model's pass
    (the hot path); ``None`` for anything else, which the model then checks and words.

    The messages are checked by ``parse_messages``, as the model's validator does, but
    only when every other field is plainly valid (so errors keep the model's order).
    """
    if not raw.keys() <= _PERSIST_FIELDS or not _short_str(raw.get("session_id")):
        return None
    if raw.get("strategy") is not None:
        return None  # a request strategy is validated (and kept) by the model
    base_seq = raw.get("base_seq")
    key = raw.get("idempotency_key")
    usage = raw.get("usage")
    if base_seq is not None and not (type(base_seq) is int and base_seq >= 0):
        return None
    if key is not None and not _short_str(key):
        return None
    if usage is not None and type(usage) is not dict:
        return None
    messages = raw.get("messages")
    if type(messages) is not list:
        return None
    try:
        checked = parse_client_messages(messages, "params.messages")
    except InvalidParamsError:
        return None
    return PersistParams.model_construct(
        session_id=raw["session_id"],
        messages=checked,
        base_seq=base_seq,
        idempotency_key=key,
        usage=usage,
    )


_PERSIST_FIELDS: Final = frozenset(PersistParams.model_fields)


# ---------------------------------------------------------------------------- handlers


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
    )
    return _append_result(result)


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
    )
    return {
        "system_instructions": wc.system_instructions,
        "messages": wc.messages,
        "base_seq": wc.base_seq,
        "token_count": wc.token_count,
        "omitted_events": wc.omitted_events,
    }


async def turn_persist(ctx: CallContext, p: PersistParams) -> dict[str, Any]:
    """Persist the messages of one turn atomically. With ``base_seq`` the session must not
    have moved past it (conflict otherwise); without it the turn is appended."""
    wc = WorkingContext(base_seq=p.base_seq or 0)
    wc.add_messages(p.messages)
    try:
        result = await (await ctx.actor()).persist_working_context(
            p.session_id,
            wc,
            idempotency_key=p.idempotency_key,
            usage=p.usage,
            on_conflict="reject" if p.base_seq is not None else "append",
            validated=True,  # the params' validator ran parse_messages
            strategy=p.strategy,
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
    return _append_result(result)


async def events_subscribe(ctx: CallContext, p: SubscribeParams) -> dict[str, Any]:
    """Notifications (``events.appended``) follow for every event with seq > ``last_seq``;
    with ``after_seq`` the events after it are sent first (resume after a reconnect: no
    gap, no duplicate). ``session.deleted {session_id}`` ends the subscription when the
    session is deleted."""
    last_seq = await ctx.connection.subscribe(
        ctx, await ctx.actor(), p.session_id, after_seq=p.after_seq
    )
    return {"session_id": p.session_id, "last_seq": last_seq}


async def events_unsubscribe(ctx: CallContext, p: SessionParams) -> dict[str, Any]:
    return {"unsubscribed": ctx.connection.unsubscribe(p.session_id)}


MAX_AGENTS_PAGE = 1000


class AgentsListParams(RpcParams):
    after: Annotated[str, Field(min_length=1, max_length=1024)] | None = None
    limit: Annotated[int, Field(ge=1, le=MAX_AGENTS_PAGE)] = MAX_AGENTS_PAGE


async def agents_list(ctx: CallContext, p: AgentsListParams) -> dict[str, Any]:
    """A page of agent ids with a folder on disk, sorted: those after ``after`` (a cursor:
    any string), at most ``limit``; ``next_after`` (the last id) only when more follow. A
    restricted token sees only its agents. The folder listing runs on a worker thread."""
    agents = await ctx.registry.list_agents_async()
    visible = [a for a in agents if (p.after is None or a > p.after) and ctx.permits(a)]
    page = visible[: p.limit]
    answer: dict[str, Any] = {"agents": page}
    if len(visible) > p.limit:
        answer["next_after"] = page[-1]
    return answer
