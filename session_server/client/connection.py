"""``RpcConnection``: a WebSocket connection speaking JSON-RPC 2.0 to the server, that
reconnects when the server goes away.

It opens the connection (a refused handshake raised as the project's exception), sends
requests (pipelined: calls may run concurrently), routes each answer to its caller and
each notification to the session's subscriptions. ``SessionClient`` adds one method per
RPC method on top.

Reconnection. Opening is retried with exponential backoff and jitter (``Backoff``) while
the server cannot be reached (refused or reset TCP connections, a handshake that times
out or breaks off, HTTP 503) for at most ``reconnect_budget`` seconds, at the first
``connect()`` and whenever a connection that was open drops (server restart, SIGTERM,
SIGKILL, an idle connection closed by the server). When the budget is spent the call
raises ``ServerUnavailable`` naming the URL and the time spent. Other refusals (401, 403,
400, 404) are raised at once. A connection that drops while calls wait for their
answers is replaced; each such call is then sent again on the new connection when that
is safe (``replay.replay_safe``: reads, keyed writes, ...), otherwise it raises
``OutcomeUnknownError`` (it may or may not have been applied). A retryable -32005 answer
(nothing ran) is retried with the same backoff. Subscriptions resume on the new
connection after the last seq each one received (``events.subscribe {after_seq}``): no
gap, no duplicate. Only ``close()`` ends the connection for good.

Several URLs (``failover``): ``url`` may be a sequence of base URLs, the nodes of a
cluster. An opening tries them in turn from the current one, waiting only after a whole
round failed; a dropped connection moves the client to the next node; a retryable
``not_owner`` refusal closes the connection (its calls and subscriptions carry on as after
a drop) and moves on too.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
from collections.abc import Mapping, Sequence
from typing import Any, Final, Self

import msgspec
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus
from websockets.protocol import State

from ..process.log_redact import redacting_logger
from ..rpc.protocol import DEFAULT_MAX_FRAME_BYTES
from ..values.agent_ids import validate_agent_id
from ..values.errors import NotFoundError, UnavailableError
from ..values.events import SessionEvent
from .backoff import Backoff
from .errors import (
    ConnectionLostError,
    OutcomeUnknownError,
    ServerUnavailable,
    error_from,
    handshake_error,
    retry_after,
)
from .failover import endpoint_urls, moves_on, next_index, round_done
from .live import LiveSubscription
from .replay import replay_safe
from .subscription import Subscription

__all__ = ["RpcConnection"]

log = logging.getLogger("session_server.client")

_ENCODER: Final = msgspec.json.Encoder()
_DECODER: Final = msgspec.json.Decoder()
# What a server that is down, starting or stopping makes an opening attempt raise.
_UNREACHABLE: Final = (OSError, TimeoutError, EOFError, InvalidHandshake, ConnectionClosed)


class _NotSent(ConnectionLostError):
    """The connection was gone before the request left: any call may be sent again."""


def _reachable_later(exc: BaseException) -> bool:
    """True for an opening failure that may pass once the server is back (not for a
    refusal such as 401/403/404, which another attempt would meet again)."""
    if isinstance(exc, InvalidStatus):
        return False  # mapped by handshake_error; 503 arrives as UnavailableError
    if isinstance(exc, UnavailableError):
        return True
    return isinstance(exc, _UNREACHABLE)


class RpcConnection:
    """The connection of a ``SessionClient`` (to one agent, or to ``/v1``).

    ``reconnect_budget`` (seconds, default 30): the longest a client tries to reach its
    server in one outage, and the longest one call waits for a connection; 0 makes one
    attempt. ``retry_delay`` (default 0.05 s) is the first wait between attempts,
    doubling with jitter up to ``max_retry_delay`` (default 2 s). ``connect_retries``
    (default ``None``: only the budget counts) caps the attempts of one outage.
    """

    def __init__(
        self,
        url: str | Sequence[str],
        agent_id: str | None,
        *,
        token: str | None = None,
        max_size: int | None = DEFAULT_MAX_FRAME_BYTES,
        open_timeout: float | None = 10.0,
        reconnect_budget: float = 30.0,
        retry_delay: float = 0.05,
        max_retry_delay: float = 2.0,
        connect_retries: int | None = None,
    ) -> None:
        if agent_id is not None:
            validate_agent_id(agent_id)  # InvalidAgentIdError before any connection
        self.agent_id = agent_id
        self.urls = endpoint_urls(url, agent_id)
        self._index = 0  # the node of ``urls`` this client talks to
        self._moving: set[asyncio.Task[None]] = set()
        self.backoff = Backoff(
            budget=reconnect_budget, initial=retry_delay, max_delay=max_retry_delay
        )
        self._token = token
        self._max_size = max_size
        self._open_timeout = open_timeout
        self._connect_retries = connect_retries
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self._opening: asyncio.Future[ClientConnection] | None = None
        self._resuming: asyncio.Task[None] | None = None
        self._closed = False
        self._ids = itertools.count(1)
        # Calls awaiting their answer, per connection (a lost one fails only its own).
        self._pending: dict[ClientConnection, dict[int, asyncio.Future[Any]]] = {}
        self._subs: dict[str, list[Subscription]] = {}
        self._lost: BaseException | None = None
        self._random = random.Random()

    @property
    def url(self) -> str:
        """The endpoint URL of the node this client talks to (or tries next)."""
        return self.urls[self._index]

    def _move_on(self) -> None:
        """The next connection goes to the next node of ``urls`` (``failover``)."""
        self._index = next_index(self._index, len(self.urls))

    @property
    def lost(self) -> BaseException | None:
        """The error that ended the last connection (``None`` while one is open, or
        before the first); the next call opens a new one."""
        return self._lost

    @property
    def closed(self) -> bool:
        """True once ``close()`` was called."""
        return self._closed

    # -- connection ----------------------------------------------------------------------
    async def connect(self) -> Self:
        """Open the connection, waiting up to ``reconnect_budget`` seconds for a server
        that is not reachable yet (then ``ServerUnavailable``). A refused handshake raises
        ``ForbiddenError`` (401/403), ``InvalidParamsError`` (400, e.g. an invalid agent
        id) or ``NotFoundError`` (404) at once."""
        await self._connection()
        return self

    async def _connection(self) -> ClientConnection:
        """The open connection; opened (all callers share one attempt) when there is
        none."""
        while True:
            if self._closed:
                raise ConnectionLostError("client is closed", data={"url": self.url})
            ws = self._ws
            if ws is not None and self._lost is None:
                return ws
            opening = self._opening
            if opening is None:
                opening = self._opening = asyncio.ensure_future(self._open())
                opening.add_done_callback(self._opened)
            try:
                await asyncio.shield(opening)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if opening.cancelled() and not (task is not None and task.cancelling()):
                    continue  # close() stopped the attempt: the loop raises "closed"
                raise

    def _opened(self, opening: asyncio.Future[ClientConnection]) -> None:
        if self._opening is opening:
            self._opening = None
        if not opening.cancelled():
            opening.exception()  # retrieved: the waiters raise it (there may be none)

    async def _open(self) -> ClientConnection:
        """Open a connection, retrying within the budget (see the module docstring)."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        for attempt in itertools.count():
            try:
                ws = await self._handshake()
            except Exception as exc:
                if not _reachable_later(exc):
                    raise
                count = len(self.urls)
                if count > 1:
                    self._move_on()
                    if not round_done(attempt, count) and loop.time() - start < self.backoff.budget:
                        log.info(
                            "cannot reach %s (%s); trying the next", self.urls[self._index - 1], exc
                        )
                        continue  # the next node at once: a wait only after a round
                rounds = attempt // count
                wait: float | None = None
                if self._connect_retries is None or rounds < self._connect_retries:
                    wait = self.backoff.wait(
                        rounds, loop.time() - start, self._random.random(),
                        min_delay=retry_after(exc),
                    )  # fmt: skip
                if wait is None or self._closed:
                    raise ServerUnavailable.after(
                        self.url, loop.time() - start, attempt + 1, exc
                    ) from exc
                log.info("cannot reach %s (%s); retrying in %.2f s", self.url, exc, wait)
                await asyncio.sleep(wait)
                continue
            if self._closed:
                await ws.close()
                raise ConnectionLostError("client is closed", data={"url": self.url})
            self._ws, self._lost = ws, None
            self._pending[ws] = {}
            self._reader = asyncio.create_task(self._read(ws))
            if self._subs:
                self._resuming = asyncio.create_task(self._resume(ws))
            return ws
        raise AssertionError("unreachable")

    async def _handshake(self) -> ClientConnection:
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else None
        try:
            return await connect(
                self.url,
                additional_headers=headers,
                max_size=self._max_size,
                open_timeout=self._open_timeout,
                logger=redacting_logger("websockets.client"),
            )
        except InvalidStatus as exc:
            raise handshake_error(exc) from exc

    async def close(self) -> None:
        """Close the connection for good: pending calls and subscriptions end with
        ``ConnectionLostError``. Idempotent."""
        self._closed = True
        opening = self._opening
        if opening is not None and not opening.done():
            opening.cancel()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await opening
        if self._resuming is not None and not self._resuming.done():
            self._resuming.cancel()
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._end_subscriptions(ConnectionLostError("client closed", data={"url": self.url}))

    async def __aenter__(self) -> Self:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _read(self, ws: ClientConnection) -> None:
        error = ConnectionLostError("connection closed")
        pending = self._pending.get(ws, {})
        try:
            async for data in ws:
                self._route(_DECODER.decode(data), pending)
        except ConnectionClosed as exc:
            error = ConnectionLostError(f"connection closed: {exc}")
        except Exception as exc:  # undecodable frame from the server
            error = ConnectionLostError(f"connection failed: {exc!r}")
            with contextlib.suppress(Exception):
                await ws.close(1002, "invalid frame")
        finally:
            if ws.close_code is not None and ws.close_code not in (1000, 1001):
                error = ConnectionLostError(
                    f"connection closed with code {ws.close_code}: {ws.close_reason}"
                )
            if self._ws is ws:
                if self._lost is None and len(self.urls) > 1:
                    self._move_on()  # a dropped node: the next one first
                self._lost = error
            self._pending.pop(ws, None)
            for future in pending.values():
                if not future.done():
                    future.set_exception(error)
            if self._subs and not self._closed and self._ws is ws:
                # Nobody may call before the next notification: reconnect now.
                reconnecting = asyncio.ensure_future(self._connection())
                reconnecting.add_done_callback(self._reconnected)

    def _reconnected(self, reconnecting: asyncio.Future[ClientConnection]) -> None:
        if reconnecting.cancelled():
            return
        error = reconnecting.exception()
        if error is not None and not self._closed:
            self._end_subscriptions(error)

    def _end_subscriptions(self, error: BaseException) -> None:
        subs, self._subs = self._subs, {}
        for session_subs in subs.values():
            for sub in session_subs:
                sub.end(error)

    async def _resume(self, ws: ClientConnection) -> None:
        """Subscribe again on a new connection, each session after the last seq its
        subscriptions received; a session deleted meanwhile ends its subscriptions."""
        for session_id, all_subs in list(self._subs.items()):
            subs = [sub for sub in all_subs if sub.active]  # the others are subscribing
            if not subs:
                continue
            after = min(sub.cursor for sub in subs)
            params: dict[str, Any] = {"session_id": session_id, "after_seq": after}
            cursors = [s.stream_cursor for s in subs if isinstance(s, LiveSubscription)]
            if cursors and None not in cursors:  # else the whole stream in progress
                params["stream_cursor"] = min(c for c in cursors if c is not None)
            try:
                await self._send(ws, "events.subscribe", params)
            except NotFoundError:
                for sub in self._subs.pop(session_id, ()):
                    sub.deleted = True
                    sub.end(None)
            except ConnectionLostError:
                return  # this connection is gone too; the next one resumes
            except Exception as exc:
                for sub in self._subs.pop(session_id, ()):
                    sub.end(exc)

    def _route(self, message: Any, pending: dict[int, asyncio.Future[Any]]) -> None:
        if isinstance(message, list):
            for item in message:
                self._route(item, pending)
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
            elif message["method"] in ("stream.chunk", "stream.closed"):
                for sub in self._subs.get(params.get("session_id", ""), ()):
                    if isinstance(sub, LiveSubscription):
                        if message["method"] == "stream.chunk":
                            sub.deliver_chunks(params)
                        else:
                            sub.deliver_closed(params)
            elif message["method"] == "session.rewound":
                for sub in self._subs.get(params.get("session_id", ""), ()):
                    sub.rewound(int(params["to_seq"]), int(params["rewind_seq"]))
            elif message["method"] == "events.gap":
                for sub in self._subs.get(params.get("session_id", ""), ()):
                    sub.gap(int(params["from_seq"]), int(params["to_seq"]))
            return
        future = pending.pop(message.get("id"), None)  # type: ignore[arg-type]
        if future is None or future.done():
            return
        if "error" in message:
            future.set_exception(error_from(message["error"] or {}))
        else:
            future.set_result(message.get("result"))

    # -- calls ---------------------------------------------------------------------------
    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Send one request (``params`` as given) and return its ``result``; a JSON-RPC
        error is raised as the mapped project exception. Reconnects as the module
        docstring says: ``ServerUnavailable`` when the budget is spent,
        ``OutcomeUnknownError`` for a lost call that is not safe to send again."""
        loop = asyncio.get_running_loop()
        since: float | None = None  # when this call first met a lost connection
        refusals = resends = 0
        while True:
            ws = await self._connection()
            try:
                return await self._send(ws, method, params)
            except _NotSent:
                continue  # the next connection takes it (within the opening budget)
            except ConnectionLostError as exc:
                if not replay_safe(method, params):
                    raise OutcomeUnknownError.of(method, self.url, exc) from exc
                since = loop.time() if since is None else since
                waited = loop.time() - since
                resends += 1
                if waited >= self.backoff.budget:
                    raise ServerUnavailable.after(self.url, waited, resends, exc) from exc
            except UnavailableError as exc:  # an answer: refused for now, nothing ran
                if not (exc.data or {}).get("retryable"):
                    raise
                if moves_on(exc.data) and self._ws is ws and self._lost is None:
                    self._leave(ws)
                since = loop.time() if since is None else since
                wait = self.backoff.wait(
                    refusals, loop.time() - since, self._random.random(),
                    min_delay=retry_after(exc),
                )  # fmt: skip
                if wait is None:
                    raise
                refusals += 1
                await asyncio.sleep(wait)

    def _leave(self, ws: ClientConnection) -> None:
        """This node said another should serve the agent: close ``ws`` (its calls in
        flight are resent when safe, its subscriptions resumed) and go to the next node
        (with one URL, the same one again: a load balancer's next pick)."""
        self._lost = ConnectionLostError(
            "the node no longer serves this agent", data={"url": self.url}
        )
        if len(self.urls) > 1:
            self._move_on()
        closing = asyncio.ensure_future(ws.close(1000, "moving to another node"))
        self._moving.add(closing)
        closing.add_done_callback(self._moving.discard)

    async def _send(
        self, ws: ClientConnection, method: str, params: Mapping[str, Any] | None
    ) -> Any:
        """One request on ``ws``; ``ConnectionLostError`` when ``ws`` is lost first."""
        pending = self._pending.get(ws)
        if pending is None or ws.state is not State.OPEN:  # closing or closed: not sent
            if self._ws is ws and self._lost is None:
                self._lost = _NotSent("connection closed")
            raise _NotSent("connection closed before the request was sent")
        rid = next(self._ids)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        pending[rid] = future
        request: dict[str, Any] = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params:
            request["params"] = params
        try:
            await ws.send(_ENCODER.encode(request), text=True)
        except ConnectionClosed as exc:
            pending.pop(rid, None)
            if self._ws is ws and self._lost is None:
                self._lost = ConnectionLostError(f"connection closed: {exc}")
            if future.done():  # the reader failed it meanwhile: nobody else will look
                future.exception()
            else:
                future.cancel()
            raise ConnectionLostError(f"connection closed: {exc}") from exc
        try:
            return await future
        finally:
            pending.pop(rid, None)
