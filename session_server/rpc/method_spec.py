"""What an RPC method is made of: its params model (``RpcParams``), the context its
handler gets (``CallContext``), its row in the method table (``MethodSpec``) and the table.

Every row names the token ``scope`` the method needs (``read``: changes nothing;
``write``: appends, persists, compaction, session create/update; ``admin``: deletes,
import, backup, cross-agent methods); a row without one is a ``TypeError``. A token
limited to sessions may only call a method whose params name one of its sessions in
``session_id`` (``sessions="param"``, the default when the params model has that field);
``sessions="filter"`` marks a method that filters its own result by
``ctx.permits_session``, ``sessions="none"`` one that touches no session data. Any other
method is refused to such a token (``"deny"``, the default without ``session_id``).
``rpc.dispatch`` enforces both.

Handlers take ``(ctx, params)``: ``ctx.actor()``
gives the ``AgentActor`` of the connection's agent (agent endpoint), ``ctx.registry`` the
registry, ``ctx.permits(agent_id)`` says whether the connection's token may address an
agent, ``ctx.connection`` the connection (subscriptions). Results are plain JSON values
(``msgspec.Struct`` values inside them are encoded as objects).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import pydantic
from pydantic import ConfigDict

from ..auth.tokens import Grant, Scope
from ..values.errors import MethodNotFoundError, TooLargeError

if TYPE_CHECKING:
    from ..runtime.actor import AgentActor
    from ..runtime.registry import ActorRegistry

__all__ = [
    "AGENT",
    "SERVER",
    "CallContext",
    "ConnectionLike",
    "Endpoint",
    "Handler",
    "MethodSpec",
    "Observer",
    "RpcParams",
    "SessionRule",
    "method_table",
]

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
        self,
        ctx: CallContext,
        actor: AgentActor,
        session_id: str,
        after_seq: int | None = None,
        stream_cursor: int | None = None,
    ) -> int:
        """Start ``events.appended`` notifications for ``session_id`` (first the events
        after ``after_seq``, when given) and ``stream.chunk``/``stream.closed`` for its
        live turns (first the chunks after ``stream_cursor``, by default every chunk of
        the stream in progress); return its last seq."""
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
    # What the request's metrics report: ``ok`` or the error code (``dispatch`` sets it;
    # the shell changes it when the answer is replaced by -32004, too large to send).
    outcome: str = "ok"
    # The size of the frame the request came in (``None``: not over RPC; a batch's items
    # share it). Its params were decoded from no more text: a handler may weigh the
    # request by it without walking the params (``turn.persist`` does, to keep a small
    # turn on the loop: ``runtime.plan_size``).
    frame_bytes: int | None = None

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

    def refused_too_large(self) -> None:
        """The answer was replaced by -32004 (too large to send): report that."""
        self.outcome = str(TooLargeError.code)


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
