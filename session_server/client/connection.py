"""``RpcConnection``: one WebSocket connection speaking JSON-RPC 2.0 to the server.

It opens the connection (a refused handshake raised as the project's exception), sends
requests (pipelined: calls may run concurrently), routes each answer to its caller and
each notification to the session's subscriptions, and when the connection drops fails
every pending call and subscription with ``ConnectionLostError``. ``SessionClient`` adds
one method per RPC method on top.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any, Final, Self
from urllib.parse import quote

import msgspec
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from ..core.agent_ids import validate_agent_id
from ..core.errors import UnavailableError
from ..core.events import SessionEvent
from ..log_redact import redacting_logger
from ..rpc.protocol import DEFAULT_MAX_FRAME_BYTES
from .errors import ConnectionLostError, error_from, handshake_error
from .subscription import Subscription

__all__ = ["RpcConnection"]

_ENCODER: Final = msgspec.json.Encoder()
_DECODER: Final = msgspec.json.Decoder()


class RpcConnection:
    """The connection of a ``SessionClient`` (to one agent, or to ``/v1``)."""

    def __init__(
        self,
        url: str,
        agent_id: str | None,
        *,
        token: str | None = None,
        max_size: int | None = DEFAULT_MAX_FRAME_BYTES,
        open_timeout: float | None = 10.0,
        connect_retries: int = 3,
        retry_delay: float = 0.05,
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
        self._connect_retries = connect_retries
        self._retry_delay = retry_delay
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
    async def connect(self) -> Self:
        """Open the connection. A refused handshake raises ``ForbiddenError`` (401/403),
        ``InvalidParamsError`` (400, e.g. an invalid agent id), ``NotFoundError`` (404) or
        ``UnavailableError`` (503: too many connections or stopping).

        A 503 or a refused TCP connection (a server starting or restarting) is retried
        ``connect_retries`` times (default 3) after ``retry_delay`` seconds, doubling up to
        2 s; then the last error is raised."""
        delay = self._retry_delay
        for attempt in itertools.count():
            try:
                return await self._open()
            except (UnavailableError, ConnectionRefusedError):
                if attempt >= self._connect_retries:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")

    async def _open(self) -> Self:
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
            raise handshake_error(exc) from exc
        self._reader = asyncio.create_task(self._read(self._ws))
        return self

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader

    async def __aenter__(self) -> Self:
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
