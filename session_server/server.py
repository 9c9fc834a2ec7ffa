"""The WebSocket JSON-RPC 2.0 server (I/O shell around ``session_server.rpc``).

Endpoints: ``/v1/agents/<url-encoded agent_id>`` (agent methods) and ``/v1`` (server
methods); plain HTTP ``GET /`` (the Memory Inspector), ``/healthz`` and ``/metrics`` are
answered by ``http_routes``. The handshake refuses, before any actor is touched: a
missing, unknown, expired, tampered or malformed token when authentication is on (401, the
body says which of these and nothing more), an unknown path (404), an invalid agent id
(400), a token not allowed for the agent (403). Method scopes and session limits are checked per call by
``rpc.methods.dispatch``. A connection whose token expires, or stops being valid after
``reload_auth``, is closed with 1008 (a frame that arrives after expiry is answered -32003
first).

Each connection reads frames in one task and handles each frame in its own task, so
requests may be pipelined; answers carry their request ids. Everything sent on a
connection (answers and ``events.appended`` notifications) goes through one ordered
outgoing queue. ``stop()`` is graceful: stop accepting, stop reading, let in-flight
requests finish and their answers go out, then close the connections (1001).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import http
import logging
import os
import time
import weakref
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol

from .auth import (
    BEARER_SUBPROTOCOL_PREFIX,
    REASON_EXPIRED,
    Authenticator,
    Grant,
    TokenRejectedError,
    TokenSet,
    token_from_headers,
)
from .core.agent_ids import validate_agent_id
from .core.errors import (
    InvalidAgentIdError,
    MemoryDirInUseError,
    NotFoundError,
    SessionServerError,
)
from .core.events import SessionEvent
from .http_routes import HttpRoutes
from .rpc.methods import AGENT, SERVER, CallContext, Endpoint, MethodSpec, dispatch
from .rpc.protocol import (
    DEFAULT_MAX_FRAME_BYTES,
    Frame,
    encode_message,
    error_response,
    notification,
    parse_frame,
)
from .rpc.table import BUILTIN_METHODS

if TYPE_CHECKING:
    from .runtime.actor import AgentActor
    from .runtime.registry import ActorRegistry

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "JSONRPC_SUBPROTOCOL",
    "SERVER_LOCK_FILE",
    "SessionServer",
    "lock_memory_dir",
]

log = logging.getLogger("session_server.server")

JSONRPC_SUBPROTOCOL: Final = "jsonrpc"
AGENT_PREFIX: Final = "/v1/agents/"


@dataclass(frozen=True, slots=True)
class _Route:
    endpoint: Endpoint
    agent_id: str | None
    grant: Grant | None


REPLAY_BATCH = 500
"""Events per ``events.appended`` notification when a subscription replays the past."""


class _Subscription:
    """Buffers events until the subscribe answer is queued, then sends the replayed events
    (those after the caller's ``after_seq``) and forwards events with seq > ``last_seq``
    as ``events.appended`` notifications; ``session.deleted`` ends it."""

    __slots__ = (
        "buffer",
        "conn",
        "deleted",
        "last_seq",
        "live",
        "replay",
        "session_id",
        "unsubscribe",
    )

    def __init__(self, conn: _Connection, session_id: str) -> None:
        self.conn = conn
        self.session_id = session_id
        self.last_seq: int | None = None
        self.live = False
        self.deleted = False
        self.buffer: list[SessionEvent] = []
        self.replay: list[SessionEvent] = []
        self.unsubscribe: Callable[[], None] = lambda: None

    def on_events(self, events: list[SessionEvent]) -> None:
        if self.live:
            self.conn.notify(self.session_id, events)
        else:
            self.buffer.extend(events)

    def on_deleted(self) -> None:
        self.deleted = True
        if self.live:
            self._end()

    def _end(self) -> None:
        self.conn.send(notification("session.deleted", {"session_id": self.session_id}))
        self.conn.unsubscribe(self.session_id)

    def go_live(self) -> None:
        if self.live or self.last_seq is None:
            return
        floor = self.last_seq
        for start in range(0, len(self.replay), REPLAY_BATCH):
            self.conn.notify(self.session_id, self.replay[start : start + REPLAY_BATCH])
        pending = [e for e in self.buffer if e.seq > floor]
        self.buffer, self.replay = [], []
        self.live = True
        if pending:
            self.conn.notify(self.session_id, pending)
        if self.deleted:
            self._end()


class _Connection:
    """One client connection: reader, per-frame tasks, ordered writer, subscriptions."""

    def __init__(self, server: SessionServer, ws: ServerConnection, route: _Route) -> None:
        self.server = server
        self.ws = ws
        self.route = route
        self.outgoing: deque[bytes] = deque()
        self.writing = False
        self.flushers: set[asyncio.Task[None]] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.subscriptions: dict[str, _Subscription] = {}
        self.observe = server.registry.operations.observe_request
        self.slots = asyncio.Semaphore(server.max_inflight)
        self.reader: asyncio.Task[None] | None = None
        self.stop_requested = False
        self.closed = False
        self.revoked: str | None = None  # why the token stopped being valid
        self.expiry: asyncio.TimerHandle | None = None

    # -- sending (everything goes through one FIFO, in order) -----------------------------
    def send(self, message: dict[str, Any] | list[dict[str, Any]]) -> None:
        """Queue ``message``; it is written after everything queued before it."""
        if not self.closed:
            self.outgoing.append(encode_message(message))
            if not self.writing:
                self._spawn_flush()

    def _spawn_flush(self) -> None:
        self.writing = True
        task = asyncio.create_task(self._flush())
        self.flushers.add(task)
        task.add_done_callback(self.flushers.discard)

    def queue(self, message: dict[str, Any] | list[dict[str, Any]]) -> None:
        """Queue ``message`` without starting a write (see ``write_out``)."""
        if not self.closed:
            self.outgoing.append(encode_message(message))

    async def write_out(self) -> None:
        """When no write is under way, write the queue from this task (saves a task
        switch per answer). Order is always the order of queueing."""
        if self.outgoing and not self.writing:
            self.writing = True
            await self._flush()

    async def _flush(self) -> None:
        try:
            while self.outgoing:
                data = self.outgoing.popleft()
                if self.closed:
                    continue
                try:
                    await self.ws.send(data, text=True)
                except ConnectionClosed:
                    self.closed = True
        finally:
            self.writing = False
            if self.outgoing and not self.closed:
                self._spawn_flush()

    def notify(self, session_id: str, events: list[SessionEvent]) -> None:
        self.send(notification("events.appended", {"session_id": session_id, "events": events}))

    # -- subscriptions (ConnectionLike) ------------------------------------------------
    async def subscribe(
        self, ctx: CallContext, actor: AgentActor, session_id: str, after_seq: int | None = None
    ) -> int:
        existing = self.subscriptions.get(session_id)
        if existing is not None:
            row = await actor.get_session(session_id)
            if row is None:
                raise NotFoundError.session(session_id)
            return int(row["last_seq"])
        sub = _Subscription(self, session_id)
        self.subscriptions[session_id] = sub
        try:
            # Registered before the reads: an append committed meanwhile is buffered, and
            # the seq floor below drops what the reads already hold (no gap, no duplicate).
            sub.unsubscribe = actor.subscribe(session_id, sub.on_events, sub.on_deleted)
            row = await actor.get_session(session_id)
            if row is None:
                raise NotFoundError.session(session_id)
            last_seq = int(row["last_seq"])
            if after_seq is not None and after_seq < last_seq:
                sub.replay = await actor.load_events(
                    session_id, limit=None, tail=False, after_seq=after_seq
                )
                last_seq = max(last_seq, max((e.seq for e in sub.replay), default=0))
        except BaseException:
            self._drop(sub)
            raise
        sub.last_seq = last_seq
        ctx.after_response(sub.go_live)
        return sub.last_seq

    def unsubscribe(self, session_id: str) -> bool:
        sub = self.subscriptions.get(session_id)
        if sub is None:
            return False
        self._drop(sub)
        return True

    def _drop(self, sub: _Subscription) -> None:
        if self.subscriptions.get(sub.session_id) is sub:
            del self.subscriptions[sub.session_id]
        sub.live = False
        sub.buffer = []
        try:
            sub.unsubscribe()
        except Exception:
            log.exception("unsubscribe from %r failed", sub.session_id)

    # -- requests -----------------------------------------------------------------------
    def _context(self) -> CallContext:
        return CallContext(self.server.registry, self.route.agent_id, self, self.route.grant)

    async def _handle(self, data: str | bytes) -> None:
        try:
            try:
                frame = parse_frame(data)
            except SessionServerError as exc:
                self.queue(error_response(None, exc))
                await self.write_out()
                return
            grant = self.route.grant
            if self.revoked or (grant is not None and grant.expired(self.server.clock())):
                await self._refuse_expired(frame)
                return
            endpoint = self.route.endpoint
            if not frame.batch:
                ctx = self._context()
                response = await dispatch(
                    frame.items[0], ctx, endpoint, self.server.methods, self.observe
                )
                if response is not None:
                    self.queue(response)
                contexts = [ctx]
            else:
                contexts = [self._context() for _ in frame.items]
                answers = await asyncio.gather(
                    *(
                        dispatch(i, c, endpoint, self.server.methods, self.observe)
                        for i, c in zip(frame.items, contexts, strict=True)
                    )
                )
                responses = [a for a in answers if a is not None]
                if responses:
                    self.queue(responses)
            for ctx in contexts:
                for callback in ctx.after:
                    callback()
            await self.write_out()
        except Exception:  # dispatch answers every error; this is a last resort
            log.exception("unexpected failure handling a frame")
        finally:
            self.slots.release()

    async def _read(self) -> None:
        try:
            async for data in self.ws:
                await self.slots.acquire()
                task = asyncio.create_task(self._handle(data))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
        except ConnectionClosed:
            pass

    # -- token lifetime ----------------------------------------------------------------------
    def set_grant(self, grant: Grant | None) -> None:
        """Use ``grant`` from now on (a rotation may change the scope); re-arm the expiry."""
        self.route = replace(self.route, grant=grant)
        if self.expiry is not None:
            self.expiry.cancel()
            self.expiry = None
        if grant is not None and grant.expires_at is not None:
            delay = max(0.0, grant.expires_at - self.server.clock())
            self.expiry = asyncio.get_running_loop().call_later(delay, self.revoke, REASON_EXPIRED)

    def revoke(self, reason: str) -> None:
        """The token is no longer valid: read no more, let requests in flight finish,
        then close with 1008 and ``reason``."""
        if self.revoked is None:
            self.revoked = reason
            self.stop_reading()

    async def _refuse_expired(self, frame: Frame) -> None:
        """Answer every request of ``frame`` -32003 (the token is no longer valid), then
        close the connection."""
        error = TokenRejectedError(self.revoked or REASON_EXPIRED)
        answers = [error_response(i.id, error) for i in frame.items if not i.notification]
        if answers:
            self.queue(answers if frame.batch else answers[0])
            await self.write_out()
        self.revoke(error.reason)

    async def run(self) -> None:
        self.set_grant(self.route.grant)
        self.reader = asyncio.create_task(self._read())
        if self.stop_requested:
            self.reader.cancel()
        try:
            with contextlib.suppress(asyncio.CancelledError):
                await self.reader
        finally:
            if self.expiry is not None:
                self.expiry.cancel()
            for sub in list(self.subscriptions.values()):
                self._drop(sub)
            await self._drain()
            while self.flushers:
                await asyncio.wait(set(self.flushers))
            if self.server.stopping:
                await self.ws.close(1001, "server shutting down")
            elif self.revoked is not None:
                await self.ws.close(1008, self.revoked)

    async def _drain(self) -> None:
        if not self.tasks:
            return
        _done, pending = await asyncio.wait(set(self.tasks), timeout=self.server.drain_timeout)
        for task in pending:
            log.warning("cancelling a request still running after %ss", self.server.drain_timeout)
            task.cancel()
        if pending:
            await asyncio.wait(pending)

    def stop_reading(self) -> None:
        self.stop_requested = True
        if self.reader is not None:
            self.reader.cancel()


class SessionServer:
    """Serve ``registry`` over WebSocket JSON-RPC 2.0.

    The caller owns the registry (and closes it after ``stop()``). ``auth`` (or, shorter,
    ``tokens``: static tokens only) decides what a token allows; neither means no
    authentication. ``clock`` (seconds since the epoch) is what token expiry is checked
    against. ``port=0`` lets the system choose; ``port``/``url`` tell which.
    Usable as ``async with SessionServer(...) as server:`` (start/stop).
    """

    def __init__(
        self,
        registry: ActorRegistry,
        *,
        host: str = "127.0.0.1",
        port: int = 8765,
        tokens: TokenSet | None = None,
        auth: Authenticator | None = None,
        clock: Callable[[], float] = time.time,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        max_inflight: int = 64,
        drain_timeout: float = 30.0,
        methods: Mapping[str, MethodSpec] | None = None,
    ) -> None:
        self.registry = registry
        # The one method table (``rpc.table``) unless the caller passes another.
        self.methods: Mapping[str, MethodSpec] = BUILTIN_METHODS if methods is None else methods
        self.host = host
        self.port = port
        self.auth = auth if auth is not None else Authenticator(tokens)
        self.clock = clock
        self.max_frame_bytes = max_frame_bytes
        self.max_inflight = max_inflight
        self.drain_timeout = drain_timeout
        self.stopping = False
        self._ws: Server | None = None
        self._routes: weakref.WeakKeyDictionary[ServerConnection, _Route] = (
            weakref.WeakKeyDictionary()
        )
        self._connections: set[_Connection] = set()
        self._stopped = asyncio.Event()
        self._lock_fd: int | None = None
        self.http = HttpRoutes(
            registry,
            auth_required=lambda: self.auth.enabled,
            stopping=lambda: self.stopping,
            open_connections=lambda: len(self._connections),
        )

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ws://{host}:{self.port}"

    async def start(self) -> None:
        """Listen; when this returns, connections are accepted and ``port`` is the real one.

        First takes the memory dir's ``server.lock`` (flock, held until ``stop()``): a
        second server on a memory dir another server holds raises ``MemoryDirInUseError``
        naming the dir, instead of starting and failing every request for the agents the
        first one holds. The kernel drops the lock when the holder dies.
        """
        self._lock_fd = lock_memory_dir(self.registry.memory_dir)
        try:
            await self._listen()
        except BaseException:
            self._release_lock()
            raise

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None

    async def _listen(self) -> None:
        self._ws = await serve(
            self._handler,
            self.host,
            self.port,
            process_request=self._process_request,
            select_subprotocol=_select_subprotocol,
            max_size=self.max_frame_bytes,
        )
        sockets = self._ws.sockets
        if sockets:
            self.port = int(sockets[0].getsockname()[1])

    async def stop(self) -> None:
        """Graceful stop: refuse new connections and requests, finish in-flight ones,
        send their answers, close every connection with 1001. Idempotent."""
        if self._ws is None or self.stopping:
            await self._stopped.wait()
            return
        self.stopping = True
        self._ws.close(close_connections=False)
        for conn in list(self._connections):
            conn.stop_reading()
        await self._ws.wait_closed()
        self._release_lock()
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    def reload_auth(self, auth: Authenticator) -> int:
        """Use ``auth`` from now on (a token rotation) and re-check every open connection's
        token against it: a connection whose token is no longer valid, or no longer allows
        its agent, is closed (1008); the others go on under the new grant. Returns how
        many were closed."""
        self.auth = auth
        now = self.clock()
        closed = 0
        for conn in list(self._connections):
            if conn.revoked is not None:  # already closing
                continue
            try:
                conn.set_grant(auth.recheck(conn.route.grant, conn.route.agent_id, now))
            except TokenRejectedError as exc:
                conn.revoke(exc.reason)
                closed += 1
        return closed

    async def __aenter__(self) -> SessionServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- handshake ---------------------------------------------------------------------
    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        public = self.http.public(connection, request)  # the page and /healthz: no token
        if public is not None:
            return public
        if self.stopping:
            return _refuse(connection, http.HTTPStatus.SERVICE_UNAVAILABLE, "server shutting down")
        grant: Grant | None = None
        if self.auth.enabled:
            token = token_from_headers(
                request.headers.get("Authorization"), _offered(request.headers)
            )
            try:
                grant = self.auth.authenticate(token, self.clock())
            except TokenRejectedError as exc:
                return _unauthorized(connection, exc.reason)
        path = urlsplit(request.path).path
        if path == "/metrics":
            if grant is not None and not grant.allows("admin"):
                return _refuse(connection, http.HTTPStatus.FORBIDDEN, "/metrics needs scope admin")
            return self.http.metrics(connection)
        if path in ("/v1", "/v1/"):
            self._routes[connection] = _Route(SERVER, None, grant)
            return None
        if not path.startswith(AGENT_PREFIX):
            return _refuse(
                connection,
                http.HTTPStatus.NOT_FOUND,
                f"unknown path {path[:200]!r}; use /v1/agents/<url-encoded agent_id> or /v1",
            )
        try:
            agent_id = validate_agent_id(unquote(path[len(AGENT_PREFIX) :], errors="strict"))
        except UnicodeDecodeError:
            return _refuse(connection, http.HTTPStatus.BAD_REQUEST, "agent_id: not valid UTF-8")
        except InvalidAgentIdError as exc:
            return _refuse(connection, http.HTTPStatus.BAD_REQUEST, exc.message)
        if grant is not None and not grant.permits(agent_id):
            return _refuse(
                connection, http.HTTPStatus.FORBIDDEN, "this token may not address this agent"
            )
        self._routes[connection] = _Route(AGENT, agent_id, grant)
        return None

    async def _handler(self, ws: ServerConnection) -> None:
        route = self._routes.pop(ws, None)
        if route is None:  # cannot happen: process_request accepted it
            await ws.close(1011, "no route")
            return
        conn = _Connection(self, ws, route)
        self._connections.add(conn)
        self.registry.operations.open_connections.inc()
        try:
            if self.stopping:
                conn.stop_reading()
            await conn.run()
        finally:
            self._connections.discard(conn)
            self.registry.operations.open_connections.dec()


SERVER_LOCK_FILE: Final = "server.lock"


def lock_memory_dir(memory_dir: Path) -> int:
    """Take ``memory_dir/server.lock`` exclusively (flock); return the open descriptor."""
    memory_dir.mkdir(parents=True, exist_ok=True)
    path = memory_dir / SERVER_LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise MemoryDirInUseError(
            f"memory dir {str(memory_dir)!r} is held by another session-server "
            f"({path} is locked); stop that server or use another --memory-dir",
            data={"memory_dir": str(memory_dir)},
        ) from None
    return fd


def _refuse(connection: ServerConnection, status: http.HTTPStatus, text: str) -> Response:
    return connection.respond(status, f"{status.value} {status.phrase}: {text}\n")


def _unauthorized(connection: ServerConnection, reason: str) -> Response:
    response = _refuse(connection, http.HTTPStatus.UNAUTHORIZED, reason)
    response.headers["WWW-Authenticate"] = 'Bearer realm="session-server", error="invalid_token"'
    return response


def _offered(headers: Headers) -> list[str]:
    return [
        p.strip()
        for value in headers.get_all("Sec-WebSocket-Protocol")
        for p in value.split(",")
        if p.strip()
    ]


def _select_subprotocol(
    connection: ServerConnection, offered: Sequence[Subprotocol]
) -> Subprotocol | None:
    """Answer ``jsonrpc`` when offered; otherwise echo a ``bearer.*`` entry (browsers fail
    a handshake whose answer names no offered subprotocol); otherwise none."""
    if JSONRPC_SUBPROTOCOL in offered:
        return Subprotocol(JSONRPC_SUBPROTOCOL)
    for proto in offered:
        if proto.startswith(BEARER_SUBPROTOCOL_PREFIX):
            return proto
    return None
