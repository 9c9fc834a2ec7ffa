"""Async Python client of the WebSocket JSON-RPC server.

::

    async with SessionClient("ws://127.0.0.1:8765", "my-agent", token="...") as client:
        sid = await client.create_session()
        await client.persist_turn(sid, [ContextMessage(role="user", content="hi")])
        ctx = await client.build_context(sid)

One client is one connection to ``/v1/agents/<quoted agent_id>`` (or ``/v1`` when
``agent_id`` is ``None``, for ``list_agents``). Calls may run concurrently (pipelined on the
connection). JSON-RPC errors are raised as the project's exceptions (``NotFoundError``,
``ConflictError`` with ``data["last_seq"]``, ...), message and data preserved. Writes
(``append_events``, ``persist_turn``) carry an idempotency key, a fresh uuid4 unless the
caller passes one, so retrying a call with the same key never writes twice. Reconnecting is
left to the caller; when the connection drops, pending calls and subscriptions raise
``ConnectionLostError``.

There is one method per RPC method (``tests/session_server/test_client_methods.py`` checks
the table): sessions (``create_session`` with ``if_exists``, ``get_or_create_session``,
``get_session``, ``list_sessions``/``session_page``/``iter_sessions`` with paging and a
metadata filter, ``update_session``, ``clear_session``, ``delete_session``), events
(``append_events``, ``load_events``, ``delete_events``, ``pop_event``), contexts
(``build_context``, ``render_context``, ``persist_turn``, ``persist_context``), memory
(``get_strategy``, ``set_strategy``, ``compact``, ``memory_view``, ``export_session``,
``import_session``), ``subscribe``, and on the server endpoint ``list_agents``,
``list_snapshots``, ``list_adapters``, ``get_metrics``.

Helpers built on it: :class:`session_server.sync_client.SyncSessionClient` (blocking
calls for scripts and ``Runner.run_sync``, reconnecting on its own) and
:func:`session_server.follow.follow` (a session's events across reconnects, no gap, no
duplicate). Importing this module imports neither the store nor the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any, Final, Literal
from urllib.parse import quote

import msgspec
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from .core.agent_ids import validate_agent_id
from .core.context import WorkingContext
from .core.errors import (
    ConflictError,
    ForbiddenError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    MethodNotFoundError,
    NotFoundError,
    ParseError,
    SessionServerError,
    TooLargeError,
    UnavailableError,
)
from .core.events import ContextMessage, SessionEvent
from .core.plans import AppendResult
from .log_redact import redacting_logger
from .rpc.protocol import DEFAULT_MAX_FRAME_BYTES

__all__ = [
    "ERROR_CLASSES",
    "ConnectionLostError",
    "SessionClient",
    "SessionPage",
    "Subscription",
    "error_from",
]

ERROR_CLASSES: Final[dict[int, type[SessionServerError]]] = {
    cls.code: cls
    for cls in (
        ParseError,
        InvalidRequestError,
        MethodNotFoundError,
        InvalidParamsError,
        InternalError,
        NotFoundError,
        ConflictError,
        ForbiddenError,
        TooLargeError,
        UnavailableError,
    )
}

_ENCODER: Final = msgspec.json.Encoder()
_DECODER: Final = msgspec.json.Decoder()
_END: Final = object()


def _handshake_error(exc: InvalidStatus) -> SessionServerError:
    status = exc.response.status_code
    body = exc.response.body.decode("utf-8", "replace").strip() if exc.response.body else ""
    message = f"handshake refused with HTTP {status}" + (f": {body}" if body else "")
    data = {"http_status": status}
    if status in (401, 403):
        return ForbiddenError(message, data=data)
    if status == 400:
        return InvalidParamsError(message, data=data)
    if status == 404:
        return NotFoundError(message, data=data)
    if status == 503:  # too many connections, or shutting down: retry later
        return UnavailableError(message, data={**data, "retryable": True})
    return InternalError(message, data=data)


def _set(**params: Any) -> dict[str, Any]:
    """The params that are not ``None`` (omitted params take the server's default)."""
    return {k: v for k, v in params.items() if v is not None}


class ConnectionLostError(ConnectionError):
    """The connection closed before an answer came (the call may or may not have run).

    For writes, ``idempotency_key`` is the key the call used: retry with it (on a new
    connection) and the write happens at most once.
    """

    idempotency_key: str | None = None


def error_from(error: dict[str, Any]) -> SessionServerError:
    """The project exception for a JSON-RPC error object (``InternalError`` if unknown)."""
    code = error.get("code")
    cls = ERROR_CLASSES.get(code, InternalError) if isinstance(code, int) else InternalError
    data = error.get("data")
    return cls(str(error.get("message", "")), data=data if isinstance(data, dict) else None)


class SessionPage(msgspec.Struct):
    """One page of ``session.list``; ``next_offset`` is ``None`` on the last page."""

    sessions: list[dict[str, Any]]
    total: int
    next_offset: int | None = None


class _Gap(msgspec.Struct, frozen=True):
    from_seq: int
    to_seq: int


class Subscription:
    """``events.appended`` notifications of one session, as an async iterator of events.

    ``last_seq`` is the session's last seq when the subscription started; iteration yields
    every later event once, in seq order (first those after ``after_seq`` when the
    subscription asked for them). ``close()`` (or leaving ``async with``) ends it;
    deleting the session ends it too, with ``deleted`` set.
    When the server reports that this subscriber fell behind (``events.gap``), iteration
    reads the missed events with ``events.load`` at that point, so the order holds.
    """

    def __init__(self, client: SessionClient, session_id: str) -> None:
        self.client = client
        self.session_id = session_id
        self.last_seq = 0
        self.deleted = False
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._pending: list[SessionEvent] = []
        self._closed = False

    def deliver(self, events: list[SessionEvent]) -> None:
        """Queue the events of one notification (called by the client's reader)."""
        self._queue.put_nowait(events)

    def gap(self, from_seq: int, to_seq: int) -> None:
        """Queue a gap the server reported (called by the client's reader)."""
        self._queue.put_nowait(_Gap(from_seq, to_seq))

    def end(self, error: BaseException | None) -> None:
        """End the iteration, raising ``error`` when given (called by the client)."""
        self._queue.put_nowait(error if error is not None else _END)

    def __aiter__(self) -> AsyncIterator[SessionEvent]:
        return self

    async def __anext__(self) -> SessionEvent:
        while not self._pending:
            item = await self._queue.get()
            if item is _END:
                self._queue.put_nowait(_END)
                raise StopAsyncIteration
            if isinstance(item, BaseException):
                self._queue.put_nowait(item)
                raise item
            if isinstance(item, _Gap):
                item = await self.client.load_events(
                    self.session_id,
                    after_seq=item.from_seq - 1,
                    limit=item.to_seq - item.from_seq + 1,
                    tail=False,
                )
            self._pending.extend(item)
        return self._pending.pop(0)

    async def next_batch(self) -> list[SessionEvent]:
        """The events of the next notification (one append), or what is buffered."""
        if self._pending:
            batch, self._pending = self._pending, []
            return batch
        first = await self.__anext__()
        batch, self._pending = [first, *self._pending], []
        return batch

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self.client.unsubscribe(self)
        self.end(None)

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class SessionClient:
    """A connection to one agent (or to ``/v1`` with ``agent_id=None``)."""

    def __init__(
        self,
        url: str,
        agent_id: str | None,
        *,
        token: str | None = None,
        max_size: int | None = DEFAULT_MAX_FRAME_BYTES,
        open_timeout: float | None = 10.0,
    ) -> None:
        base = url.rstrip("/")
        if agent_id is not None:
            validate_agent_id(agent_id)  # InvalidAgentIdError before any connection
        self.agent_id = agent_id
        self.url = (
            f"{base}/v1" if agent_id is None else f"{base}/v1/agents/{quote(agent_id, safe='')}"
        )
        self._token = token
        self._max_size = max_size
        self._open_timeout = open_timeout
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._subs: dict[str, list[Subscription]] = {}
        self._lost: BaseException | None = None

    @property
    def lost(self) -> BaseException | None:
        """The error that ended the connection (``None`` while it is open or unopened)."""
        return self._lost

    # -- connection ----------------------------------------------------------------------
    async def connect(self) -> SessionClient:
        """Open the connection. A refused handshake raises ``ForbiddenError`` (401/403),
        ``InvalidParamsError`` (400, e.g. an invalid agent id), ``NotFoundError`` (404) or
        ``UnavailableError`` (503: too many connections or stopping; retry later)."""
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else None
        try:
            self._ws = await connect(
                self.url,
                additional_headers=headers,
                max_size=self._max_size,
                open_timeout=self._open_timeout,
                logger=redacting_logger("websockets.client"),
            )
        except InvalidStatus as exc:
            raise _handshake_error(exc) from exc
        self._reader = asyncio.create_task(self._read(self._ws))
        return self

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader

    async def __aenter__(self) -> SessionClient:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _read(self, ws: ClientConnection) -> None:
        error: BaseException = ConnectionLostError("connection closed")
        try:
            async for data in ws:
                self._route(_DECODER.decode(data))
        except ConnectionClosed as exc:
            error = ConnectionLostError(f"connection closed: {exc}")
        except Exception as exc:  # undecodable frame from the server
            error = ConnectionLostError(f"connection failed: {exc!r}")
            await ws.close(1002, "invalid frame")
        finally:
            if ws.close_code is not None and ws.close_code not in (1000, 1001):
                error = ConnectionLostError(
                    f"connection closed with code {ws.close_code}: {ws.close_reason}"
                )
            self._lost = error
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(error)
            self._pending.clear()
            for subs in self._subs.values():
                for sub in subs:
                    sub.end(error)
            self._subs.clear()

    def _route(self, message: Any) -> None:
        if isinstance(message, list):
            for item in message:
                self._route(item)
            return
        if not isinstance(message, dict):
            return
        if "method" in message:
            params = message.get("params") or {}
            if message["method"] == "events.appended":
                subs = self._subs.get(params.get("session_id", ""), ())
                if subs:
                    events = msgspec.convert(params.get("events", []), list[SessionEvent])
                    for sub in subs:
                        sub.deliver(events)
            elif message["method"] == "session.deleted":
                for sub in self._subs.pop(params.get("session_id", ""), ()):
                    sub.deleted = True
                    sub.end(None)
            elif message["method"] == "events.gap":
                for sub in self._subs.get(params.get("session_id", ""), ()):
                    sub.gap(int(params["from_seq"]), int(params["to_seq"]))
            return
        future = self._pending.pop(message.get("id"), None)  # type: ignore[arg-type]
        if future is None or future.done():
            return
        if "error" in message:
            future.set_exception(error_from(message["error"] or {}))
        else:
            future.set_result(message.get("result"))

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Send one request (``params`` as given) and return its ``result``; a JSON-RPC
        error is raised as the mapped project exception."""
        if self._ws is None:
            raise ConnectionLostError("not connected (use `async with` or connect())")
        if self._lost is not None:
            raise self._lost
        rid = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[rid] = future
        request: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params:
            request["params"] = params
        try:
            await self._ws.send(_ENCODER.encode(request), text=True)
        except ConnectionClosed as exc:
            self._pending.pop(rid, None)
            raise ConnectionLostError(f"connection closed: {exc}") from exc
        try:
            return await future
        finally:
            self._pending.pop(rid, None)

    # -- sessions ------------------------------------------------------------------------
    async def create_session(
        self,
        metadata: dict[str, Any] | None = None,
        session_id: str | None = None,
        *,
        if_exists: Literal["error", "return"] = "error",
    ) -> str:
        """Create a session and return its id. An existing ``session_id`` raises
        ``ConflictError``, or with ``if_exists="return"`` is simply returned."""
        result = await self.call(
            "session.create",
            _set(
                metadata=metadata,
                session_id=session_id,
                if_exists=None if if_exists == "error" else if_exists,
            ),
        )
        return str(result["session_id"])

    async def get_or_create_session(
        self, session_id: str, metadata: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """The session ``session_id``, created (with ``metadata``) when it does not exist:
        ``session.create`` with ``if_exists: "return"``. ``created`` says which happened."""
        params = _set(session_id=session_id, metadata=metadata, if_exists="return")
        return dict(await self.call("session.create", params))

    async def get_session(self, session_id: str) -> dict[str, Any]:
        """The session object; ``NotFoundError`` when it does not exist."""
        return dict(await self.call("session.get", {"session_id": session_id}))

    async def list_sessions(
        self,
        *,
        metadata: dict[str, Any] | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Sessions, most recently updated first (one page with ``limit``/``offset``),
        keeping those whose metadata has every key of ``metadata`` with that exact value."""
        return (await self.session_page(metadata=metadata, limit=limit, offset=offset)).sessions

    async def session_page(
        self,
        *,
        metadata: dict[str, Any] | None = None,
        limit: int | None = None,
        offset: int = 0,
    ) -> SessionPage:
        """One page of ``session.list``: sessions, the total matching, the next offset."""
        params = _set(metadata=metadata, limit=limit, offset=offset or None)
        result = await self.call("session.list", params)
        sessions = list(result["sessions"])
        total = int(result.get("total", offset + len(sessions)))
        return SessionPage(sessions, total, result.get("next_offset"))

    async def iter_sessions(
        self, *, metadata: dict[str, Any] | None = None, page_size: int = 100
    ) -> AsyncIterator[dict[str, Any]]:
        """Every matching session, fetched ``page_size`` at a time."""
        offset: int | None = 0
        while offset is not None:
            page = await self.session_page(metadata=metadata, limit=page_size, offset=offset)
            for session in page.sessions:
                yield session
            offset = page.next_offset

    async def update_session(
        self, session_id: str, metadata: dict[str, Any] | None
    ) -> dict[str, Any]:
        """Replace the session's metadata (``None`` clears it); the updated session."""
        params = {"session_id": session_id, "metadata": metadata}
        return dict(await self.call("session.update", params))

    async def delete_session(self, session_id: str) -> bool:
        return bool((await self.call("session.delete", {"session_id": session_id}))["deleted"])

    async def clear_session(self, session_id: str) -> int:
        """Delete every event of the session at once; the session (metadata, strategy)
        stays. Returns how many events were deleted."""
        return int((await self.call("session.clear", {"session_id": session_id}))["deleted"])

    # -- events --------------------------------------------------------------------------
    async def append_events(
        self,
        session_id: str,
        events: Sequence[SessionEvent | dict[str, Any]],
        *,
        expected_last_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> AppendResult:
        key = idempotency_key or str(uuid.uuid4())
        params = _set(
            session_id=session_id,
            events=list(events),
            expected_last_seq=expected_last_seq,
            idempotency_key=key,
        )
        return msgspec.convert(await self._write("events.append", params, key), AppendResult)

    async def _write(self, method: str, params: dict[str, Any], key: str) -> Any:
        try:
            return await self.call(method, params)
        except ConnectionLostError as exc:
            lost = ConnectionLostError(*exc.args)
            lost.idempotency_key = key
            raise lost from exc

    async def load_events(
        self,
        session_id: str,
        *,
        limit: int | None = 50,
        tail: bool = True,
        since: int | None = None,
        after_seq: int | None = None,
        actions: Sequence[str] | None = None,
    ) -> list[SessionEvent]:
        """Events oldest first (see ``AgentActor.load_events``)."""
        params = _set(
            session_id=session_id,
            tail=tail,
            since=since,
            after_seq=after_seq,
            actions=list(actions) if actions is not None else None,
        )
        params["limit"] = limit  # null means no limit
        result = await self.call("events.load", params)
        return msgspec.convert(result["events"], list[SessionEvent])

    async def delete_events(self, session_id: str, event_ids: Sequence[str]) -> int:
        result = await self.call(
            "events.delete", {"session_id": session_id, "event_ids": list(event_ids)}
        )
        return int(result["deleted"])

    async def pop_event(
        self,
        session_id: str,
        *,
        event_id: str | None = None,
        replace_with: SessionEvent | dict[str, Any] | None = None,
    ) -> SessionEvent | None:
        """Remove the newest event that is not a compaction record (``replace_with``:
        rewrite it in place instead), atomically; the event as it was, ``None`` if none.
        With ``event_id`` it must be the newest such event (``ConflictError`` otherwise)."""
        params = _set(session_id=session_id, event_id=event_id, replace_with=replace_with)
        result = await self.call("events.pop", params)
        event = result["event"]
        return None if event is None else msgspec.convert(event, SessionEvent)

    # -- contexts ------------------------------------------------------------------------
    async def build_context(
        self,
        session_id: str,
        *,
        system_instructions: str | Sequence[str] | None = None,
        limit: int | None = None,
        strategy: dict[str, Any] | None = None,
    ) -> WorkingContext:
        """The working context for the next model call. Its messages are history: add the
        turn's messages with ``add_message`` and send them with ``persist_context``."""
        if isinstance(system_instructions, str):
            system_instructions = [system_instructions]
        result = await self.call(
            "context.build",
            _set(
                session_id=session_id,
                system_instructions=None
                if system_instructions is None
                else list(system_instructions),
                limit=limit,
                strategy=strategy,
            ),
        )
        return WorkingContext(
            result["system_instructions"],
            msgspec.convert(result["messages"], list[ContextMessage]),
            base_seq=int(result["base_seq"]),
            token_count=result.get("token_count"),
            omitted_events=int(result.get("omitted_events") or 0),
        )

    async def persist_turn(
        self,
        session_id: str,
        messages: Sequence[ContextMessage | dict[str, Any]],
        *,
        base_seq: int | None = None,
        idempotency_key: str | None = None,
        usage: dict[str, Any] | None = None,
        strategy: dict[str, Any] | None = None,
    ) -> AppendResult:
        """Persist one turn atomically; with ``base_seq`` a moved session is a conflict.
        ``strategy`` is the request level of the strategy the pressure check uses."""
        key = idempotency_key or str(uuid.uuid4())
        params = _set(
            session_id=session_id,
            messages=list(messages),
            base_seq=base_seq,
            idempotency_key=key,
            usage=usage,
            strategy=strategy,
        )
        return msgspec.convert(await self._write("turn.persist", params, key), AppendResult)

    async def persist_context(
        self,
        session_id: str,
        ctx: WorkingContext,
        *,
        idempotency_key: str | None = None,
        usage: dict[str, Any] | None = None,
        on_conflict: Literal["append", "reject"] = "append",
        strategy: dict[str, Any] | None = None,
    ) -> AppendResult:
        """``persist_turn`` of ``ctx.get_new_messages()``, like the local
        ``AgentActor.persist_working_context``."""
        return await self.persist_turn(
            session_id,
            ctx.get_new_messages(),
            base_seq=ctx.base_seq if on_conflict == "reject" else None,
            idempotency_key=idempotency_key,
            usage=usage,
            strategy=strategy,
        )

    async def render_context(
        self,
        session_id: str,
        adapter: str,
        *,
        system_instructions: str | Sequence[str] | None = None,
        limit: int | None = None,
        strategy: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """``context.render``: ``{adapter, payload, base_seq, token_count}``, ``payload``
        ready for the provider's SDK (``adapters.names()`` lists the adapters)."""
        if isinstance(system_instructions, str):
            system_instructions = [system_instructions]
        params = _set(
            session_id=session_id,
            adapter=adapter,
            system_instructions=None if system_instructions is None else list(system_instructions),
            limit=limit,
            strategy=strategy,
        )
        return dict(await self.call("context.render", params))

    # -- memory ------------------------------------------------------------------------------
    async def get_strategy(self, session_id: str | None = None) -> dict[str, Any]:
        """``{server, agent, session, effective}`` strategies (no session: the agent's)."""
        return dict(await self.call("memory.get_strategy", _set(session_id=session_id)))

    async def set_strategy(
        self, strategy: dict[str, Any] | None, session_id: str | None = None
    ) -> dict[str, Any]:
        """Persist a session's strategy (the agent default without ``session_id``);
        ``None`` clears it."""
        params = {"strategy": strategy, **_set(session_id=session_id)}
        return dict(await self.call("memory.set_strategy", params))

    async def compact(
        self,
        session_id: str,
        *,
        strategy: dict[str, Any] | None = None,
        system_instructions: str | Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Compact now (``memory.compact``); ``compacted: false`` with a ``reason`` when
        there was nothing to do."""
        if isinstance(system_instructions, str):
            system_instructions = [system_instructions]
        params = _set(
            session_id=session_id,
            strategy=strategy,
            system_instructions=None if system_instructions is None else list(system_instructions),
        )
        return dict(await self.call("memory.compact", params))

    async def memory_view(self, session_id: str | None = None, **options: Any) -> dict[str, Any]:
        """``memory.view`` of a session (the latest one when ``None``); ``options`` are its
        flags (``include_raw_traces=False``, ``raw_trace_limit=20``, ...)."""
        return dict(await self.call("memory.view", _set(session_id=session_id, **options)))

    async def export_session(self, session_id: str, *, name: str | None = None) -> dict[str, Any]:
        """``export.session``: ``{name, files: {file name: text}, trace_count}``."""
        return dict(await self.call("export.session", _set(session_id=session_id, name=name)))

    async def import_session(
        self,
        files: dict[str, str],
        *,
        session_id: str | None = None,
        new_ids: bool = False,
        **options: Any,
    ) -> dict[str, Any]:
        """``import.session`` of exported files (as ``export_session`` gives them): ids and
        seqs kept when ``session_rows.jsonl`` is among them; ``new_ids`` makes a copy."""
        params = _set(files=files, session_id=session_id, new_ids=new_ids or None, **options)
        return dict(await self.call("import.session", params))

    async def backup_agent(self) -> dict[str, Any]:
        """``agent.backup`` (admin): a consistent copy of this agent's SQLite file,
        ``{file, bytes, sha256, sessions, events, ..., data}`` with ``data`` in base64.
        Connect with a ``max_size`` above the file's size (x 4/3) for a large agent."""
        return dict(await self.call("agent.backup", {}))

    async def restore_agent(self, data: str, sha256: str, *, force: bool = False) -> dict[str, Any]:
        """``agent.restore`` (admin): replace this agent's file with a backup's ``data``
        (base64) whose SHA-256 is ``sha256``; ``force`` when the agent exists."""
        params = {"data": data, "sha256": sha256, "force": force}
        return dict(await self.call("agent.restore", params))

    # -- subscriptions ---------------------------------------------------------------------
    async def subscribe(self, session_id: str, *, after_seq: int | None = None) -> Subscription:
        """Start receiving the session's new events: ``async for event in sub``. With
        ``after_seq`` (say the last seq seen before a reconnect) the events after it come
        first, with no gap and no duplicate. To resume across reconnects by itself, use
        :func:`session_server.follow.follow`."""
        sub = Subscription(self, session_id)
        self._subs.setdefault(session_id, []).append(sub)  # before the request: no gap
        try:
            params = _set(session_id=session_id, after_seq=after_seq)
            result = await self.call("events.subscribe", params)
        except BaseException:
            self._forget(sub)
            raise
        sub.last_seq = int(result["last_seq"])
        return sub

    def _forget(self, sub: Subscription) -> bool:
        """Drop ``sub``; true when it was the last one of its session."""
        subs = self._subs.get(sub.session_id, [])
        if sub in subs:
            subs.remove(sub)
        if subs:
            return False
        self._subs.pop(sub.session_id, None)
        return True

    async def unsubscribe(self, sub: Subscription) -> None:
        """Stop the notifications of ``sub`` (``Subscription.close`` calls this)."""
        if self._forget(sub) and self._lost is None:
            with contextlib.suppress(ConnectionLostError):
                await self.call("events.unsubscribe", {"session_id": sub.session_id})

    # -- server endpoint -------------------------------------------------------------------
    async def list_agents(self) -> list[str]:
        """Agent ids, every page (server endpoint: construct the client with
        ``agent_id=None``)."""
        agents: list[str] = []
        params: dict[str, Any] = {}
        while True:
            page = await self.call("agents.list", params)
            agents += page["agents"]
            if page.get("next_after") is None:
                return agents
            params = {"after": page["next_after"]}

    async def list_snapshots(
        self,
        *,
        search: str | None = None,
        page: int = 1,
        page_size: int = 50,
        group: Literal["folder", "agent"] = "folder",
    ) -> dict[str, Any]:
        """A page of memory snapshot summaries, newest first (server endpoint); ``group=
        "agent"`` gives one entry per agent (its latest session)."""
        params = _set(search=search, page=page, page_size=page_size, group=group)
        return dict(await self.call("memory.list_snapshots", params))

    async def list_adapters(self) -> list[str]:
        """Names of the provider adapters ``render_context`` accepts (server endpoint)."""
        return list((await self.call("adapters.list"))["adapters"])

    async def get_metrics(self) -> dict[str, Any]:
        """Compaction counters and open agents (server endpoint)."""
        return dict(await self.call("metrics.get"))
