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
)
from .core.events import ContextMessage, SessionEvent
from .core.plans import AppendResult
from .rpc.protocol import DEFAULT_MAX_FRAME_BYTES

__all__ = ["ERROR_CLASSES", "ConnectionLostError", "SessionClient", "Subscription", "error_from"]

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


class Subscription:
    """``events.appended`` notifications of one session, as an async iterator of events.

    ``last_seq`` is the session's last seq when the subscription started; iteration yields
    every later event once, in seq order (first those after ``after_seq`` when the
    subscription asked for them). ``close()`` (or leaving ``async with``) ends it;
    deleting the session ends it too, with ``deleted`` set.
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

    # -- connection ----------------------------------------------------------------------
    async def connect(self) -> SessionClient:
        """Open the connection. A refused handshake raises ``ForbiddenError`` (401/403),
        ``InvalidParamsError`` (400, e.g. an invalid agent id) or ``NotFoundError`` (404)."""
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else None
        try:
            self._ws = await connect(
                self.url,
                additional_headers=headers,
                max_size=self._max_size,
                open_timeout=self._open_timeout,
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
        self, metadata: dict[str, Any] | None = None, session_id: str | None = None
    ) -> str:
        result = await self.call("session.create", _set(metadata=metadata, session_id=session_id))
        return str(result["session_id"])

    async def get_session(self, session_id: str) -> dict[str, Any]:
        """The session object; ``NotFoundError`` when it does not exist."""
        return dict(await self.call("session.get", {"session_id": session_id}))

    async def list_sessions(self) -> list[dict[str, Any]]:
        return list((await self.call("session.list"))["sessions"])

    async def delete_session(self, session_id: str) -> bool:
        return bool((await self.call("session.delete", {"session_id": session_id}))["deleted"])

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
    ) -> AppendResult:
        """Persist one turn atomically; with ``base_seq`` a moved session is a conflict."""
        key = idempotency_key or str(uuid.uuid4())
        params = _set(
            session_id=session_id,
            messages=list(messages),
            base_seq=base_seq,
            idempotency_key=key,
            usage=usage,
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
    ) -> AppendResult:
        """``persist_turn`` of ``ctx.get_new_messages()``, like the local
        ``AgentActor.persist_working_context``."""
        return await self.persist_turn(
            session_id,
            ctx.get_new_messages(),
            base_seq=ctx.base_seq if on_conflict == "reject" else None,
            idempotency_key=idempotency_key,
            usage=usage,
        )

    # -- subscriptions ---------------------------------------------------------------------
    async def subscribe(self, session_id: str, *, after_seq: int | None = None) -> Subscription:
        """Start receiving the session's new events: ``async for event in sub``. With
        ``after_seq`` (say the last seq seen before a reconnect) the events after it come
        first, with no gap and no duplicate."""
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
        """Agent ids (server endpoint: construct the client with ``agent_id=None``)."""
        return list((await self.call("agents.list"))["agents"])
