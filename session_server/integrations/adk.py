"""Google ADK's ``BaseSessionService`` and ``BaseMemoryService``, backed by session-server.

One constructor changes::

    session_service = SessionServerSessionService(url="ws://127.0.0.1:8765", agent_id="support")
    runner = Runner(agent=agent, app_name="support", session_service=session_service)

or, in the server's process, with no RPC: ``SessionServerSessionService(registry=registry,
agent_id="support")``. ``agent_id`` may instead be a mapping from ADK ``app_name`` to
agent id (``{"support": "support-agent", "sales": "sales-agent"}``) or a callable; an
app missing from a mapping is refused with ``InvalidParamsError``.

Storage: an ADK session is the session-server session of the same id, its metadata
``{"adk_kind": "session", "adk_app": app_name, "adk_user": user_id, "adk_state": {...},
"adk_state_seq": n}``. Events are stored as ordinary session-server events (messages,
tool calls, tool results) with the ADK event verbatim in their metadata
(:mod:`session_server.integrations.adk_events`), so the inspector, search, compaction and
adapters see the conversation and ``get_session`` gives back equal ``Event`` objects.

State follows ADK's scopes: session keys live in the session's metadata (``adk_state``, as
of the event ``adk_state_seq``; a state update lost to a crash after its event committed
is replayed from the events' own ``state_delta`` on the next read); ``app:`` keys in one
holder session per app and ``user:`` keys in one per (app, user) (``adk_kind`` ``"app"``
and ``"user"``, never listed as ADK sessions); ``temp:`` keys live only on the session
object of the running invocation, never stored.

Stale sessions: a session object remembers the session's last seq when it was read
(``Session._storage_update_marker``, ADK's own field for this); ``append_event`` appends
with ``expected_last_seq`` and raises ADK's ``StaleSessionError`` when another writer
appended meanwhile (compaction records the server wrote do not count).

With ``strategy`` (``{"mode": "compact"}``, ``{"mode": "summarize"}``, ...), stored on each
session this service creates, ``get_session`` returns the compacted history as ADK
events: the memory block first (one user event, ``invocation_id``
``"session-server-compaction"``), then the raw tail verbatim, with placeholders for old
tool outputs; ADK's own ``events_compaction_config`` can be left off.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import math
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.memory.base_memory_service import BaseMemoryService, SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session
from typing_extensions import override

from session_server.concurrency.worker_threads import default_threads
from session_server.integrations.adk_events import (
    ADK_EVENT,
    adk_event_ids,
    adk_events_of,
    adk_usage,
    context_to_events,
    event_to_records,
    merged_state,
    split_state,
)
from session_server.integrations.home_loop import HomeLoop
from session_server.mirror_io.writer import validate_new_session_id
from session_server.values.codec import new_event_id
from session_server.values.context import WorkingContext
from session_server.values.errors import (
    ConflictError,
    InvalidParamsError,
    NotFoundError,
    TooLargeError,
)
from session_server.values.events import ACTIONS, SessionEvent
from session_server.values.plans import AppendResult

if TYPE_CHECKING:
    from session_server.client.sync_client import SyncSessionClient
    from session_server.runtime.actor import AgentActor
    from session_server.runtime.registry import ActorRegistry

__all__ = ["SessionServerMemoryService", "SessionServerSessionService", "server_session_id"]

T = TypeVar("T")
AgentIds = str | Mapping[str, str] | Callable[[str], str]
_STORED: Final = [a for a in ACTIONS if a != "compaction"]
_PAGE: Final = 1000
_LIST_PAGE: Final = 1000  # the most session.list answers in one page
_APPEND_ATTEMPTS: Final = 8
_WRITE_BACK: Final = 64
RECONNECT_BUDGET: Final = 30.0
MEMORY_SESSION: Final = "adk-memory"
"""The ADK session id that ``add_events_to_memory`` without a ``session_id`` adds to."""
STALE_MESSAGE: Final = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)


class _Backend(Protocol):
    """What the services need from one agent of session-server, remote or local."""

    async def create(self, session_id: str, metadata: dict[str, Any]) -> dict[str, Any]: ...
    async def get(self, session_id: str) -> dict[str, Any] | None: ...
    async def update(self, session_id: str, metadata: dict[str, Any]) -> None: ...
    async def merge(self, session_id: str, metadata: dict[str, Any]) -> dict[str, Any]: ...
    async def delete(self, session_id: str) -> None: ...
    async def sessions(self, metadata: dict[str, Any]) -> list[dict[str, Any]]: ...
    async def load(
        self,
        session_id: str,
        *,
        limit: int | None,
        tail: bool,
        after_seq: int | None = None,
        since: int | None = None,
    ) -> list[SessionEvent]: ...
    async def append(
        self,
        session_id: str,
        events: list[SessionEvent],
        expected_last_seq: int | None,
        usage: tuple[dict[str, Any] | None, str | None] = (None, None),
    ) -> AppendResult: ...
    async def set_strategy(self, session_id: str, strategy: dict[str, Any]) -> None: ...
    async def build(self, session_id: str, strategy: dict[str, Any]) -> WorkingContext: ...
    async def search(self, query: str, limit: int) -> dict[str, Any]: ...
    async def aclose(self) -> None: ...


class _Remote:
    def __init__(
        self, url: str | Sequence[str], agent_id: str, token: str | None, budget: float
    ) -> None:
        from session_server.client.sync_client import SyncSessionClient

        self.client: SyncSessionClient = SyncSessionClient(
            url, agent_id, token=token, reconnect_budget=budget
        )

    async def create(self, session_id: str, metadata: dict[str, Any]) -> dict[str, Any]:
        await self.client.acall("create_session", metadata, session_id)
        session = await self.get(session_id)
        assert session is not None
        return session

    async def get(self, session_id: str) -> dict[str, Any] | None:
        try:
            session: dict[str, Any] = await self.client.acall("get_session", session_id)
        except NotFoundError:
            return None
        return session

    async def update(self, session_id: str, metadata: dict[str, Any]) -> None:
        await self.client.acall("update_session", session_id, metadata)

    async def merge(self, session_id: str, metadata: dict[str, Any]) -> dict[str, Any]:
        row: dict[str, Any] = await self.client.acall(
            "update_session", session_id, metadata, merge=True
        )
        return row

    async def delete(self, session_id: str) -> None:
        await self.client.acall("delete_session", session_id)

    async def sessions(self, metadata: dict[str, Any]) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            try:
                page = await self.client.acall(
                    "session_page",
                    metadata=metadata,
                    limit=_LIST_PAGE,
                    cursor=cursor,
                    count=False,
                )
            except NotFoundError:  # an agent with no store yet has no session
                return found
            found += page.sessions
            if page.next_cursor is None:
                return found
            cursor = page.next_cursor

    async def load(
        self,
        session_id: str,
        *,
        limit: int | None,
        tail: bool,
        after_seq: int | None = None,
        since: int | None = None,
    ) -> list[SessionEvent]:
        events: list[SessionEvent] = await self.client.acall(
            "load_events",
            session_id,
            limit=limit,
            tail=tail,
            after_seq=after_seq,
            since=since,
            actions=_STORED,
        )
        return events

    async def append(
        self,
        session_id: str,
        events: list[SessionEvent],
        expected_last_seq: int | None,
        usage: tuple[dict[str, Any] | None, str | None] = (None, None),
    ) -> AppendResult:
        result: AppendResult = await self.client.acall(
            "append_events",
            session_id,
            events,
            expected_last_seq=expected_last_seq,
            idempotency_key=new_event_id(),
            usage=usage[0],
            model=usage[1],
        )
        return result

    async def set_strategy(self, session_id: str, strategy: dict[str, Any]) -> None:
        await self.client.acall("set_strategy", session_id, strategy)

    async def build(self, session_id: str, strategy: dict[str, Any]) -> WorkingContext:
        ctx: WorkingContext = await self.client.acall(
            "build_context", session_id, strategy=strategy
        )
        return ctx

    async def search(self, query: str, limit: int) -> dict[str, Any]:
        result: dict[str, Any] = await self.client.acall(
            "call", "memory.search", {"query": query, "limit": limit}
        )
        return result

    async def aclose(self) -> None:
        await self.client.aclose()


class _Local:
    """The registry's actor, called on the registry's loop whatever loop the caller is on."""

    def __init__(self, registry: ActorRegistry, agent_id: str) -> None:
        self.registry = registry
        self.agent_id = agent_id
        self.home = HomeLoop()

    async def _on_home(self, call: Coroutine[Any, Any, T]) -> T:
        return await self.home.run(call)

    async def _run(self, fn: Callable[[AgentActor], Coroutine[Any, Any, T]]) -> T:
        async def go() -> T:
            return await fn(await self.registry.get(self.agent_id))

        return await self._on_home(go())

    async def create(self, session_id: str, metadata: dict[str, Any]) -> dict[str, Any]:
        async def go(actor: AgentActor) -> dict[str, Any]:
            await actor.create_session(metadata=metadata, session_id=session_id)
            session = await actor.get_session(session_id)
            assert session is not None
            return session

        return await self._run(go)

    async def get(self, session_id: str) -> dict[str, Any] | None:
        return await self._run(lambda actor: actor.get_session(session_id))

    async def update(self, session_id: str, metadata: dict[str, Any]) -> None:
        await self._run(lambda actor: actor.update_session(session_id, metadata))

    async def merge(self, session_id: str, metadata: dict[str, Any]) -> dict[str, Any]:
        return await self._run(lambda actor: actor.update_session(session_id, metadata, merge=True))

    async def delete(self, session_id: str) -> None:
        await self._run(lambda actor: actor.delete_session(session_id))

    async def sessions(self, metadata: dict[str, Any]) -> list[dict[str, Any]]:
        async def go(actor: AgentActor) -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = []
            after: tuple[int, int, str] | None = None
            while True:
                page, _ = await actor.list_sessions_page(
                    metadata=metadata, limit=_LIST_PAGE, after=after, count=False
                )
                found += page
                if len(page) < _LIST_PAGE:
                    return found
                last = page[-1]
                after = (int(last["updated_at"]), int(last["created_at"]), str(last["id"]))

        return await self._run(go)

    async def load(
        self,
        session_id: str,
        *,
        limit: int | None,
        tail: bool,
        after_seq: int | None = None,
        since: int | None = None,
    ) -> list[SessionEvent]:
        return await self._run(
            lambda actor: actor.load_events(
                session_id,
                limit=limit,
                tail=tail,
                after_seq=after_seq,
                since=since,
                actions=_STORED,
            )
        )

    async def append(
        self,
        session_id: str,
        events: list[SessionEvent],
        expected_last_seq: int | None,
        usage: tuple[dict[str, Any] | None, str | None] = (None, None),
    ) -> AppendResult:
        async def go(actor: AgentActor) -> AppendResult:
            if await actor.get_session(session_id) is None:
                raise NotFoundError.session(session_id)
            return await actor.append_events(
                session_id,
                events,
                expected_last_seq=expected_last_seq,
                usage=usage[0],
                model=usage[1],
            )

        return await self._run(go)

    async def set_strategy(self, session_id: str, strategy: dict[str, Any]) -> None:
        await self._run(lambda actor: actor.set_strategy(strategy, session_id))

    async def build(self, session_id: str, strategy: dict[str, Any]) -> WorkingContext:
        return await self._run(
            lambda actor: actor.build_working_context(session_id, strategy=strategy)
        )

    async def search(self, query: str, limit: int) -> dict[str, Any]:
        return await self._run(lambda actor: actor.search(query, limit=limit))

    async def aclose(self) -> None:
        return None  # the registry belongs to the caller


class _Agents:
    """One backend per agent id, made on first use."""

    def __init__(
        self,
        agent_id: AgentIds,
        url: str | Sequence[str] | None,
        registry: ActorRegistry | None,
        token: str | None,
        reconnect_budget: float,
    ) -> None:
        if (url is None) == (registry is None):
            raise InvalidParamsError(
                "url/registry: give exactly one (url for a server, registry for in-process)",
                data={"field": "url"},
            )
        if not (isinstance(agent_id, str | Mapping) or callable(agent_id)):
            raise InvalidParamsError(
                "agent_id: must be a string, a mapping from app_name or a callable",
                data={"field": "agent_id"},
            )
        if (
            isinstance(reconnect_budget, bool)
            or not isinstance(reconnect_budget, int | float)
            or not 0 <= reconnect_budget < math.inf
        ):
            raise InvalidParamsError(
                "reconnect_budget: must be a number of seconds, 0 or more",
                data={"field": "reconnect_budget"},
            )
        self.agent_id = agent_id
        self.url = url
        self.registry = registry
        self.token = token
        self.budget = float(reconnect_budget)
        self.backends: dict[str, _Backend] = {}

    def agent_of(self, app_name: str) -> str:
        if isinstance(self.agent_id, str):
            return self.agent_id
        if isinstance(self.agent_id, Mapping):
            if app_name not in self.agent_id:
                raise InvalidParamsError(
                    f"app_name: {app_name!r} has no agent in the agent_id mapping",
                    data={"field": "app_name"},
                )
            return str(self.agent_id[app_name])
        return str(self.agent_id(app_name))

    def of(self, app_name: str) -> _Backend:
        agent = self.agent_of(app_name)
        backend = self.backends.get(agent)
        if backend is None:
            backend = (
                _Remote(self.url, agent, self.token, self.budget)
                if self.url is not None
                else _Local(self.registry, agent)  # type: ignore[arg-type]
            )
            self.backends[agent] = backend
        return backend

    async def aclose(self) -> None:
        backends, self.backends = list(self.backends.values()), {}
        for backend in backends:
            await backend.aclose()


ON_LOOP_EVENTS: Final = 256
"""ADK events validated on the caller's event loop; more go to a worker thread (pydantic
validation of an ``Event`` costs about a millisecond: a long history would hold the
loop, the server's own for an in-process service, for seconds)."""


async def _events_of(records: list[SessionEvent]) -> list[Event]:
    if len(records) <= ON_LOOP_EVENTS:
        return adk_events_of(records)
    return await default_threads().run(adk_events_of, records)


async def _all_records(
    backend: _Backend, session_id: str, *, after_seq: int = 0, since: int | None = None
) -> list[SessionEvent]:
    """Every stored record of the session after ``after_seq`` (from ``since``, ms), read
    in pages; a page over the server's answer bound (large inline data) is asked again
    at half the size."""
    records: list[SessionEvent] = []
    cursor = after_seq
    page_size = _PAGE
    while True:
        try:
            page = await backend.load(
                session_id, limit=page_size, tail=False, after_seq=cursor, since=since
            )
        except TooLargeError:
            if page_size == 1:
                raise
            page_size = max(1, page_size // 2)
            continue
        records += page
        if len(page) < page_size:
            return records
        cursor = page[-1].seq


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


_ESCAPES: Final = str.maketrans({"%": "%25", "~": "%7E", "/": "%2F", "\\": "%5C"})


def server_session_id(app_name: str, user_id: str, session_id: str) -> str:
    """The session-server session id of an ADK session: ``<app>~<user>~<id>`` (``%``,
    ``~`` and path separators percent-encoded), or ``adk-<sha256>`` when that is not a
    valid session id (too long, control characters, ...). ADK keys sessions by all three,
    so two users may each have a session ``"s1"``."""
    readable = "~".join(p.translate(_ESCAPES) for p in (app_name, user_id, session_id))
    try:
        return validate_new_session_id(readable)
    except InvalidParamsError:
        return f"adk-{_digest(app_name, user_id, session_id)}"


def _app_holder(app_name: str) -> str:
    return f"adk-app-state-{_digest(app_name)}"


def _user_holder(app_name: str, user_id: str) -> str:
    return f"adk-user-state-{_digest(app_name, user_id)}"


def _meta(session: Mapping[str, Any]) -> dict[str, Any]:
    metadata = session.get("metadata")
    return dict(metadata) if isinstance(metadata, dict) else {}


HOLDER_KEY: Final = "adk_state:"
"""The metadata key prefix of one ``app:`` or ``user:`` state key in its holder session."""


def _holder_keys(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The state a holder session keeps: one metadata key per state key (over the whole
    ``adk_state`` object that holders written by earlier versions keep)."""
    state = dict(meta.get("adk_state") or {})
    state.update(
        {k.removeprefix(HOLDER_KEY): v for k, v in meta.items() if k.startswith(HOLDER_KEY)}
    )
    return state


def _owned(session: Mapping[str, Any], app_name: str, user_id: str) -> bool:
    meta = _meta(session)
    return (
        meta.get("adk_kind") == "session"
        and meta.get("adk_app") == app_name
        and meta.get("adk_user") == user_id
    )


def _created(stored: Mapping[str, Any]) -> float:
    """When the session was created, in seconds (ADK's ``last_update_time`` of a session
    with no event)."""
    return int(stored.get("created_at") or stored.get("updated_at") or 0) / 1000 or time.time()


def _marker(session: Session) -> int | None:
    marker = session._storage_update_marker  # noqa: SLF001 - ADK's field for stale checks
    return int(marker) if marker is not None and marker.isdigit() else None


def _set_marker(session: Session, last_seq: int) -> None:
    session._storage_update_marker = str(last_seq)  # noqa: SLF001 - ADK's stale-check field


class SessionServerSessionService(BaseSessionService):
    """An ADK session service stored in session-server (see the module docstring).

    Remote: ``SessionServerSessionService(url=..., agent_id=..., token=None,
    strategy=None, reconnect_budget=30.0)``; local: ``SessionServerSessionService(
    registry=..., agent_id=...)``. ``agent_id`` is an agent id, a mapping from
    ``app_name`` to agent id, or a callable taking the ``app_name``.
    """

    def __init__(
        self,
        *,
        agent_id: AgentIds,
        url: str | Sequence[str] | None = None,
        registry: ActorRegistry | None = None,
        token: str | None = None,
        strategy: dict[str, Any] | None = None,
        reconnect_budget: float = RECONNECT_BUDGET,
    ) -> None:
        if strategy is not None and not isinstance(strategy, dict):
            raise InvalidParamsError("strategy: must be an object", data={"field": "strategy"})
        self.agents = _Agents(agent_id, url, registry, token, reconnect_budget)
        self.strategy = strategy

    # -- sessions --------------------------------------------------------------------------
    @override
    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        backend = self.agents.of(app_name)
        session_id = session_id.strip() if session_id else str(uuid.uuid4())
        sid = server_session_id(app_name, user_id, session_id)
        app_delta, user_delta, own = split_state(state)
        metadata = {
            "adk_kind": "session",
            "adk_app": app_name,
            "adk_user": user_id,
            "adk_id": session_id,
            "adk_state": own,
            "adk_state_seq": 0,
        }
        try:
            stored = await backend.create(sid, metadata)
        except ConflictError as exc:
            raise AlreadyExistsError(f"Session with id {session_id} already exists.") from exc
        if self.strategy is not None:
            await backend.set_strategy(sid, self.strategy)
        app_state, user_state = await self._update_scoped(
            backend, app_name, user_id, app_delta, user_delta
        )
        session = Session(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=merged_state(app_state, user_state, own),
            last_update_time=_created(stored),
        )
        _set_marker(session, int(stored.get("last_seq") or 0))
        return session

    @override
    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        backend = self.agents.of(app_name)
        session_id = session_id.strip() if session_id else session_id
        sid = server_session_id(app_name, user_id, session_id)
        stored = await backend.get(sid)
        if stored is None or not _owned(stored, app_name, user_id):
            return None
        last_seq = int(stored.get("last_seq") or 0)
        try:
            events = await self._events(backend, sid, config)
            plain = self.strategy is None and (config is None or config.after_timestamp is None)
            newest = events[-1:] if plain and events else None
            if newest is None:
                newest = await self._newest(backend, sid, 1)
        except NotFoundError:
            return None
        own = await self._session_state(backend, sid, stored)
        app_state, user_state = await self._scoped(backend, app_name, user_id)
        session = Session(
            id=session_id,
            app_name=app_name,
            user_id=user_id,
            state=merged_state(app_state, user_state, own),
            events=events,
            last_update_time=newest[0].timestamp if newest else _created(stored),
        )
        _set_marker(session, last_seq)
        return session

    @override
    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        """Sessions of the app (of one user when ``user_id`` is given), oldest update first,
        without events, with their merged state; read from the server in pages (in
        ``session.list`` order, uncounted). The filter is ``adk_app`` (and ``adk_user``)
        alone: the holder sessions of ``app:``/``user:`` state it also matches come in the
        same pages, so their states cost no further call, and are left out of the list."""
        backend = self.agents.of(app_name)
        wanted: dict[str, Any] = {"adk_app": app_name}
        if user_id is not None:
            wanted["adk_user"] = user_id
        found = await backend.sessions(wanted)
        app_state: dict[str, Any] | None = None
        users: dict[str, dict[str, Any]] = {}
        own: list[dict[str, Any]] = []
        for stored in found:
            meta = _meta(stored)
            kind = meta.get("adk_kind")
            if kind == "session":
                own.append(stored)
            elif kind == "app" and stored["id"] == _app_holder(app_name):
                app_state = _holder_keys(meta)
            elif kind == "user" and stored["id"] == _user_holder(
                app_name, str(meta.get("adk_user"))
            ):
                users[str(meta.get("adk_user"))] = _holder_keys(meta)
        if app_state is None:
            app_state = await self._holder_state(backend, _app_holder(app_name))
        sessions: list[Session] = []
        for stored in own:
            meta = _meta(stored)
            owner = str(meta.get("adk_user"))
            sessions.append(
                Session(
                    id=str(meta.get("adk_id") or stored["id"]),
                    app_name=app_name,
                    user_id=owner,
                    # No holder listed: the user has no user: state (as of the list).
                    state=merged_state(
                        app_state, users.get(owner, {}), meta.get("adk_state") or {}
                    ),
                    last_update_time=int(stored.get("updated_at") or 0) / 1000,
                )
            )
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    @override
    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        backend = self.agents.of(app_name)
        sid = server_session_id(app_name, user_id, session_id)
        stored = await backend.get(sid)
        if stored is None or not _owned(stored, app_name, user_id):
            return
        with contextlib.suppress(NotFoundError):
            await backend.delete(sid)

    @override
    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        backend = self.agents.of(app_name)
        return await self._holder_state(backend, _user_holder(app_name, user_id))

    # -- events ----------------------------------------------------------------------------
    @override
    async def append_event(self, session: Session, event: Event) -> Event:
        if event.partial:
            return event
        self._apply_temp_state(session, event)
        event = self._trim_temp_delta_state(event)
        backend = self.agents.of(session.app_name)
        sid = server_session_id(session.app_name, session.user_id, session.id)
        records = event_to_records(event)
        usage = adk_usage(event)
        expected = _marker(session)
        for _ in range(_APPEND_ATTEMPTS):
            try:
                result = await backend.append(sid, records, expected, usage)
                break
            except NotFoundError as exc:
                raise SessionNotFoundError(f"Session {session.id} not found.") from exc
            except ConflictError as exc:
                if expected is None or not await self._only_compaction_since(
                    backend, sid, expected
                ):
                    raise StaleSessionError(STALE_MESSAGE) from exc
                last = (exc.data or {}).get("last_seq")
                if not isinstance(last, int):
                    raise StaleSessionError(STALE_MESSAGE) from exc
                expected = last
        else:
            raise StaleSessionError(STALE_MESSAGE)
        delta = event.actions.state_delta if event.actions else None
        if delta:
            await self._store_state(backend, sid, session, delta, result.last_seq)
        _set_marker(session, result.last_seq)
        session.last_update_time = event.timestamp
        return self._commit_event_to_session(session, event)

    async def close(self) -> None:
        """Close the remote connections (in-process services have nothing to close)."""
        await self.agents.aclose()

    async def __aenter__(self) -> SessionServerSessionService:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- internals -------------------------------------------------------------------------
    async def _only_compaction_since(self, backend: _Backend, session_id: str, seq: int) -> bool:
        """Whether every event after ``seq`` is a compaction record the server wrote."""
        newer = await backend.load(session_id, limit=1, tail=False, after_seq=seq)
        return not newer

    async def _events(
        self, backend: _Backend, session_id: str, config: GetSessionConfig | None
    ) -> list[Event]:
        recent = config.num_recent_events if config is not None else None
        after = config.after_timestamp if config is not None else None
        if recent == 0:
            return []
        if self.strategy is not None:
            ctx = await backend.build(session_id, self.strategy)
            now = time.time()
            if len(ctx.messages) <= ON_LOOP_EVENTS:
                events = context_to_events(ctx, now=now)
            else:
                events = await default_threads().run(
                    functools.partial(context_to_events, ctx, now=now)
                )
        elif after is not None:
            since = math.floor(after * 1000)
            records = await _all_records(backend, session_id, since=since)
            events = await _events_of(records)
        elif recent is not None:
            events = await self._newest(backend, session_id, recent)
        else:
            events = await _events_of(await _all_records(backend, session_id))
        if after is not None:
            events = [e for e in events if e.timestamp >= after]
        if recent is not None:
            events = events[-recent:]
        return events

    async def _newest(self, backend: _Backend, session_id: str, count: int) -> list[Event]:
        """The newest ``count`` ADK events, read from the newest records only (an ADK event
        with several function responses is several records: read twice as many until
        enough are found)."""
        limit = count
        while True:
            try:
                records = await backend.load(session_id, limit=limit, tail=True)
            except TooLargeError:  # large events: read the history in pages instead
                return (await _events_of(await _all_records(backend, session_id)))[-count:]
            events = await _events_of(records)
            if len(events) >= count or len(records) < limit:
                return events[-count:]
            limit *= 2

    async def _session_state(
        self,
        backend: _Backend,
        session_id: str,
        stored: Mapping[str, Any],
        *,
        write_back: bool = True,
    ) -> dict[str, Any]:
        """The session's own state: as stored, plus the session-scoped deltas of the events
        after ``adk_state_seq`` (events with no session delta leave it behind, and so does
        a state update a crash lost after its event committed). When that tail is
        ``_WRITE_BACK`` records or more, the state and its seq are written back so the next
        read starts there (any consistent pair is safe: reads replay from its seq)."""
        meta = _meta(stored)
        own = dict(meta.get("adk_state") or {})
        seq = int(meta.get("adk_state_seq") or 0)
        if seq >= int(stored.get("last_seq") or 0):
            return own
        records = await _all_records(backend, session_id, after_seq=seq)
        for record in records:
            blob = (record.metadata or {}).get(ADK_EVENT)
            if isinstance(blob, dict):
                delta = (blob.get("actions") or {}).get("state_delta") or {}
                own.update(split_state(delta)[2])
        if write_back and len(records) >= _WRITE_BACK:
            meta["adk_state"] = own
            meta["adk_state_seq"] = records[-1].seq
            with contextlib.suppress(NotFoundError):
                await backend.update(session_id, meta)
        return own

    async def _store_state(
        self,
        backend: _Backend,
        sid: str,
        session: Session,
        delta: Mapping[str, Any],
        last_seq: int,
    ) -> None:
        app_delta, user_delta, own_delta = split_state(delta)
        if own_delta:
            stored = await backend.get(sid)
            if stored is not None:
                meta = _meta(stored)
                own = dict(meta.get("adk_state") or {})
                if int(meta.get("adk_state_seq") or 0) < last_seq:
                    own = await self._session_state(
                        backend, sid, {**stored, "last_seq": last_seq - 1}, write_back=False
                    )
                own.update(own_delta)
                meta["adk_state"] = own
                meta["adk_state_seq"] = last_seq
                with contextlib.suppress(NotFoundError):
                    await backend.update(sid, meta)
        await self._update_scoped(backend, session.app_name, session.user_id, app_delta, user_delta)

    async def _scoped(
        self, backend: _Backend, app_name: str, user_id: str
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        return (
            await self._holder_state(backend, _app_holder(app_name)),
            await self._holder_state(backend, _user_holder(app_name, user_id)),
        )

    async def _holder_state(self, backend: _Backend, holder: str) -> dict[str, Any]:
        stored = await backend.get(holder)
        return {} if stored is None else _holder_keys(_meta(stored))

    async def _update_scoped(
        self,
        backend: _Backend,
        app_name: str,
        user_id: str,
        app_delta: dict[str, Any],
        user_delta: dict[str, Any],
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Merge the deltas into the app's and the user's holder sessions; their states."""
        app = await self._merge_holder(
            backend, _app_holder(app_name), {"adk_kind": "app", "adk_app": app_name}, app_delta
        )
        user = await self._merge_holder(
            backend,
            _user_holder(app_name, user_id),
            {"adk_kind": "user", "adk_app": app_name, "adk_user": user_id},
            user_delta,
        )
        return app, user

    async def _merge_holder(
        self, backend: _Backend, holder: str, base: dict[str, Any], delta: dict[str, Any]
    ) -> dict[str, Any]:
        """Set the keys of ``delta`` in the holder session, one metadata key per state key
        (``session.update {merge: true}``: read and written in one transaction on the
        server, so writers in other processes setting other keys at once keep theirs, as
        ADK's ``DatabaseSessionService`` merges deltas in one transaction); the state."""
        if not delta:
            return await self._holder_state(backend, holder)
        keys = {HOLDER_KEY + k: copy.deepcopy(v) for k, v in delta.items()}
        stored = await backend.get(holder)
        if stored is None:
            try:
                created = await backend.create(holder, {**base, **keys})
                return _holder_keys(_meta(created))
            except ConflictError:
                pass  # made meanwhile by another writer: merge into it
        return _holder_keys(_meta(await backend.merge(holder, keys)))


class SessionServerMemoryService(BaseMemoryService):
    """ADK memory answered by session-server's full-text search (``memory.search``).

    Constructed as :class:`SessionServerSessionService` is. Sessions that a
    ``SessionServerSessionService`` on the same server stores are searchable as they are
    written, so ``add_session_to_memory`` has nothing to copy for them; a session from
    another service (``InMemorySessionService``, ...) is copied in, once per event.
    ``search_memory`` keeps the hits in the app's sessions of that user, best first, each
    a ``MemoryEntry`` with the event's own content and author, and ``custom_metadata``
    ``{session_id, seq, score, snippet, in_context}``.
    """

    def __init__(
        self,
        *,
        agent_id: AgentIds,
        url: str | Sequence[str] | None = None,
        registry: ActorRegistry | None = None,
        token: str | None = None,
        limit: int = 10,
        reconnect_budget: float = RECONNECT_BUDGET,
    ) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise InvalidParamsError(
                "limit: must be an integer from 1 to 1000", data={"field": "limit"}
            )
        self._sessions = SessionServerSessionService(
            agent_id=agent_id,
            url=url,
            registry=registry,
            token=token,
            reconnect_budget=reconnect_budget,
        )
        self._agents = self._sessions.agents
        self.limit = limit

    @override
    async def add_session_to_memory(self, session: Session) -> None:
        await self._add(session.app_name, session.user_id, session.id, session.events)

    @override
    async def add_events_to_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        events: Sequence[Event],
        session_id: str | None = None,
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Add ``events`` (a delta) to the session ``session_id``, or without one to the
        user's ``"adk-memory"`` session; events already there (by id) are skipped.
        ``custom_metadata`` is not used."""
        await self._add(app_name, user_id, session_id or MEMORY_SESSION, events)

    async def _add(
        self, app_name: str, user_id: str, session_id: str, events: Sequence[Event]
    ) -> None:
        backend = self._agents.of(app_name)
        sid = server_session_id(app_name, user_id, session_id)
        stored = await backend.get(sid)
        if stored is None:
            with contextlib.suppress(AlreadyExistsError):  # made meanwhile: add to it
                await self._sessions.create_session(
                    app_name=app_name, user_id=user_id, session_id=session_id
                )
        elif not _owned(stored, app_name, user_id):
            raise AlreadyExistsError(
                f"Session with id {session_id} belongs to another app or user."
            )
        known = adk_event_ids(await _all_records(backend, sid))
        fresh: list[Event] = []
        for event in events:
            if event.partial or event.id in known:
                continue
            known.add(event.id)
            fresh.append(event)
        records = [r for e in fresh for r in event_to_records(e)]
        if records:
            await backend.append(sid, records, None)

    @override
    async def search_memory(
        self, *, app_name: str, user_id: str, query: str
    ) -> SearchMemoryResponse:
        backend = self._agents.of(app_name)
        result = await backend.search(query, self.limit)
        owners: dict[str, str | None] = {}  # server session id -> ADK id, None: not theirs
        memories: list[MemoryEntry] = []
        for hit in result.get("hits") or []:
            session_id = str(hit.get("session_id"))
            if session_id not in owners:
                stored = await backend.get(session_id)
                owned = stored is not None and _owned(stored, app_name, user_id)
                owners[session_id] = str(_meta(stored or {}).get("adk_id")) if owned else None
            adk_id = owners[session_id]
            if adk_id is None:
                continue
            seq = int(hit.get("seq") or 0)
            records = await backend.load(session_id, limit=1, tail=False, after_seq=seq - 1)
            events = adk_events_of(r for r in records if r.seq == seq)
            entry = _entry({**hit, "session_id": adk_id}, events[0] if events else None)
            if entry is not None:
                memories.append(entry)
        return SearchMemoryResponse(memories=memories)

    async def close(self) -> None:
        await self._agents.aclose()


def _entry(hit: Mapping[str, Any], event: Event | None) -> MemoryEntry | None:
    from google.genai import types

    metadata = {
        "session_id": hit.get("session_id"),
        "seq": hit.get("seq"),
        "score": hit.get("score"),
        "snippet": hit.get("snippet"),
        "in_context": hit.get("in_context"),
    }
    if event is not None and event.content is not None:
        return MemoryEntry(
            id=event.id,
            content=event.content,
            author=event.author,
            timestamp=datetime.fromtimestamp(event.timestamp, UTC).isoformat(),
            custom_metadata=metadata,
        )
    snippet = hit.get("snippet")
    if not isinstance(snippet, str):
        return None
    return MemoryEntry(
        id=str(hit.get("event_id")),
        content=types.Content(role="user", parts=[types.Part(text=snippet)]),
        custom_metadata=metadata,
    )
