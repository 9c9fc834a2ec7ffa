"""The WebSocket JSON-RPC 2.0 server (I/O shell around ``session_server.rpc``).

Endpoints: ``/v1/agents/<url-encoded agent_id>`` (agent methods) and ``/v1`` (server
methods); plain HTTP ``GET /`` (the Memory Inspector), ``/healthz`` and ``/metrics`` are
answered by ``http_routes``. The handshake refuses, before any actor is touched: a
missing, unknown, expired, tampered or malformed token when authentication is on (401, the
body says which of these and nothing more), an unknown path (404), an invalid agent id
(400), a token not allowed for the agent (403). Method scopes and session limits are checked per call by
``rpc.dispatch.dispatch``. A connection whose token expires, or stops being valid after
``reload_auth``, is closed with 1008 (a frame that arrives after expiry is answered -32003
first).

Each connection reads frames in one task and handles each frame in its own task, so
requests may be pipelined; answers carry their request ids. Everything sent on a
connection (answers and ``events.appended`` notifications) goes through one ordered
outgoing queue. ``stop()`` is graceful: stop accepting, stop reading, let in-flight
requests finish and their answers go out, then close the connections (1001).

This module is the server's start, stop, handshake decisions and token rotation; the
rest is split by job: ``connection_pump`` (one connection: reader, per-frame tasks,
ordered writer, its bounds), ``fanout`` (subscriptions and their fan-out),
``handshake`` (routes, HTTP refusals, the subprotocol), ``answers`` (bounded answer
encoding) and ``rate_limited_log``. The names they export that callers used from here
(``REPLAY_BATCH``, ``FANOUT_SLICE``, ``ENCODE_SLICE``, ``JSONRPC_SUBPROTOCOL``,
``quiet_accept_errors``) are importable from here still.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import logging
import os
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import unquote, urlsplit

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response

from ..auth.tokens import (
    Authenticator,
    Grant,
    TokenRejectedError,
    TokenSet,
    token_from_headers,
)
from ..concurrency.flow import ByteBudget, Permits
from ..process.forward_metrics import forward_metrics
from ..process.limits import derive_limits
from ..process.log_redact import redacting_logger
from ..rpc.method_spec import AGENT, SERVER, MethodSpec
from ..rpc.protocol import DEFAULT_MAX_FRAME_BYTES
from ..rpc.table import BUILTIN_METHODS
from ..storage.file_lock import try_exclusive_lock
from ..storage.file_modes import make_dir
from ..storage.staging import sweep_staging
from ..values.agent_ids import validate_agent_id
from ..values.errors import InvalidAgentIdError, MemoryDirInUseError
from ..values.forwarding import FORWARD_HEADER, MIN_CLUSTER_SECRET_BYTES, credential_valid
from ..values.ownership import OwnerDirectory
from .connection_pump import Connection
from .fanout import Topic
from .forwarding import MISDIRECTED, ForwardedConnection, Forwarder, OwnerRefusal, unlocated
from .handshake import (
    AGENT_PREFIX,
    Route,
    offered_subprotocols,
    refuse,
    refuse_oversized,
    select_subprotocol,
    unauthorized,
)
from .handshake_guard import (
    GuardedConnection,
    HandshakeGate,
    guarded,
    quiet_client_handshake_failures,
)
from .http_routes import HttpRoutes
from .intake import HeldBytes, IntakeConnection, intake_connection
from .origins import OriginPolicy
from .rate_limited_log import RateLimitedLog

if TYPE_CHECKING:
    from ..runtime.actor import AgentActor
    from ..runtime.registry import ActorRegistry

__all__ = [
    "SERVER_LOCK_FILE",
    "SessionServer",
    "lock_memory_dir",
]

log = logging.getLogger("session_server.server")


class SessionServer:
    """Serve ``registry`` over WebSocket JSON-RPC 2.0.

    The caller owns the registry (and closes it after ``stop()``). ``auth`` (or, shorter,
    ``tokens``: static tokens only) decides what a token allows; neither means no
    authentication. ``clock`` (seconds since the epoch) is what token expiry is checked
    against. ``port=0`` lets the system choose; ``port``/``url`` tell which.
    Usable as ``async with SessionServer(...) as server:`` (start/stop).

    Bounds on what clients control (each documented in docs/operations.md, "Limits"):

    - ``max_frame_bytes``: largest frame (bigger: close 1009);
    - ``max_inflight`` frames per connection whose answer is not yet written;
    - ``max_unread_answer_bytes``: answers and notifications encoded and not yet taken by
      a socket, all connections together (default 16 x ``max_answer_bytes``); a request
      that may answer up to ``max_answer_bytes`` reserves that much before it runs and
      waits for room (``answers.answer_reservation``);
    - ``max_outgoing_bytes``: each connection's share of that bound (default 2 x
      ``max_answer_bytes``); while it is full the connection is not read and its next
      requests wait;
    - ``write_timeout``: a queued message its socket does not take within this many
      seconds drops the connection (the client does not read);
    - ``max_batch`` requests per batch (more: -32600); a batch runs one request at a time;
    - ``max_answer_bytes`` per answer (a batch's answers together; more: -32004);
    - ``max_request_bytes``: frames being handled, all connections together;
    - ``large_frame_threshold`` bytes a connection may have received and not yet handed
      to a handler; beyond, it needs one of ``large_frame_permits`` (default: as many
      maximal frames as half of ``max_request_bytes``) or is not read (``intake``); a
      permit held ``large_frame_hold_timeout`` while the connection's reader takes no
      message (its own answers are unread) drops the connection;
    - ``max_subscriber_bytes`` of notifications queued per subscription (then a gap);
    - ``max_subscriptions`` per connection;
    - ``max_connections`` (default derived from ``RLIMIT_NOFILE``): WebSocket connections
      the server admitted (after the token check); more get HTTP 503 with
      ``Retry-After``;
    - ``max_handshakes``: connections accepted whose request the server has not decided
      on yet (apart from ``max_connections``); a new one beyond drops the oldest
      (``handshake_guard``);
    - ``handshake_timeout``: seconds from accept to the end of the WebSocket handshake
      (then the connection is dropped);
    - ``idle_timeout``: a connection with no frame and nothing in flight for that long is
      closed (1000), also when it answers pings or holds subscriptions, unless one of its
      subscriptions delivered events since the watchdog's previous look
      (``connection_pump``);
    - ``allow_origins``: browser origins allowed besides the server's own (``*``: any);
      a request whose ``Origin`` is another is refused with HTTP 403 (``origins``).
    - ``stop_timeout``: ``stop()`` returns within about this many seconds whatever the
      clients do (requests still running are cancelled, unwritable connections aborted).

    Cluster mode: ``owner_directory`` says which node serves each agent; a connection to
    an agent another node owns is forwarded to it (``forwarding``, docs/front-door.md),
    authenticated there by the client's own token and a node credential derived from
    ``cluster_secret`` (the same secret on every node, at least 32 bytes). Without a
    directory nothing is looked up: the handshake is the single-node one.
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
        max_outgoing_bytes: int | None = None,
        max_unread_answer_bytes: int | None = None,
        write_timeout: float | None = 60.0,
        max_batch: int = 64,
        max_answer_bytes: int | None = None,
        max_request_bytes: int | None = None,
        large_frame_threshold: int = 1024 * 1024,
        large_frame_permits: int | None = None,
        large_frame_hold_timeout: float | None = 30.0,
        max_subscriber_bytes: int = 1024 * 1024,
        max_subscriptions: int = 256,
        max_connections: int | None = None,
        max_handshakes: int = 128,
        handshake_timeout: float | None = 10.0,
        idle_timeout: float | None = 300.0,
        allow_origins: Sequence[str] = (),
        stop_timeout: float = 10.0,
        methods: Mapping[str, MethodSpec] | None = None,
        owner_directory: OwnerDirectory | None = None,
        cluster_secret: bytes | None = None,
    ) -> None:
        self.registry = registry
        # Cluster mode: who serves each agent (``values.ownership``; the cluster node).
        # ``None``: single node, every agent is served here.
        self.owner_directory = owner_directory
        # The one method table (``rpc.table``) unless the caller passes another.
        self.methods: Mapping[str, MethodSpec] = BUILTIN_METHODS if methods is None else methods
        self.host = host
        self.port = port
        self.auth = auth if auth is not None else Authenticator(tokens)
        self.clock = clock
        self.max_frame_bytes = max_frame_bytes
        self.max_inflight = max(1, max_inflight)
        self.max_batch = max(1, max_batch)
        self.max_answer_bytes = max_answer_bytes or max(max_frame_bytes, 1024 * 1024)
        self.max_outgoing_bytes = max_outgoing_bytes or 2 * self.max_answer_bytes
        # Unread answers, all connections: one class (every reservation is a whole
        # answer's worth); each connection's share is its own ``ByteBudget``.
        self.answer_budget = ByteBudget(
            max(max_unread_answer_bytes or 16 * self.max_answer_bytes, self.max_outgoing_bytes),
            large_share=1.0,
        )
        self.write_timeout = write_timeout
        # Two maximal frames at once (large frames may hold half the budget), the other
        # half for ordinary requests.
        self.budget = ByteBudget(max_request_bytes or 4 * max_frame_bytes)
        # Messages over the threshold are received under a permit (``intake``): as many
        # maximal frames as the budget's large share holds, so a permit holder never
        # waits for the large share.
        self.large_frame_threshold = max(1, min(large_frame_threshold, max_frame_bytes))
        self.large_frame_hold_timeout = large_frame_hold_timeout
        self.permits = Permits(
            large_frame_permits or max(1, self.budget.large_limit // max(1, max_frame_bytes))
        )
        self.intake_held = HeldBytes()
        ops = registry.operations
        ops.intake_bytes.set_function(lambda: self.intake_held.total)
        ops.intake_bytes_peak.set_function(lambda: self.intake_held.peak)
        ops.frame_permits.set_function(lambda: self.permits.count)
        ops.frame_permits_in_use.set_function(lambda: self.permits.in_use)
        ops.frame_permits_peak.set_function(lambda: self.permits.peak)
        ops.answer_bytes.set_function(lambda: self.answer_budget.in_use)
        ops.answer_bytes_peak.set_function(lambda: self.answer_budget.peak)
        ops.answer_waiting.set_function(lambda: self.answer_budget.waiting)
        self.max_subscriber_bytes = max_subscriber_bytes
        self.max_subscriptions = max_subscriptions
        self.max_connections = max_connections or derive_limits().max_connections
        self.max_handshakes = max(1, max_handshakes)
        self.handshake_timeout = handshake_timeout
        self.origins = OriginPolicy.of(allow_origins)
        self.gate: HandshakeGate[GuardedConnection] = HandshakeGate(
            self.max_handshakes, self.max_connections, self._evicted
        )
        self._evictions = RateLimitedLog(
            "dropping the oldest handshake in progress: %d in progress, the maximum is %d "
            "(max_handshakes); %d dropped in the last %.0f s"
        )
        self.idle_timeout = idle_timeout
        self.stop_timeout = stop_timeout
        self.stopping = False
        self._deadline: float | None = None
        self.topics: dict[tuple[str, str], Topic] = {}
        self._refusals = RateLimitedLog(
            "refusing connections: %d open, the maximum is %d (max_connections); "
            "%d refused in the last %.0f s"
        )
        self._ws: Server | None = None
        self._routes: weakref.WeakKeyDictionary[ServerConnection, Route] = (
            weakref.WeakKeyDictionary()
        )
        self._connections: set[Connection] = set()
        self._stopped = asyncio.Event()
        self._lock_fd: int | None = None
        self.cluster_secret = cluster_secret
        self.forwarder: Forwarder | None = None
        if owner_directory is not None:
            if cluster_secret is None or len(cluster_secret) < MIN_CLUSTER_SECRET_BYTES:
                raise ValueError(
                    f"cluster_secret: an owner_directory needs a cluster secret of at "
                    f"least {MIN_CLUSTER_SECRET_BYTES} bytes (the same on every node)"
                )
            self.forwarder = Forwarder(
                owner_directory,
                cluster_secret,
                forward_metrics(registry.operations.registry, registry.operations.namespace),
                # The owner's answers are bounded by its max_answer_bytes (the same
                # settings on every node), notifications by its max_frame_bytes.
                max_size=2 * max(self.max_answer_bytes, max_frame_bytes),
                open_timeout=handshake_timeout,
            )
        self._upstreams: weakref.WeakKeyDictionary[ServerConnection, ClientConnection] = (
            weakref.WeakKeyDictionary()
        )
        self._forwarded: set[ForwardedConnection] = set()
        self.http = HttpRoutes(
            registry,
            auth_required=lambda: self.auth.enabled,
            stopping=lambda: self.stopping,
            open_connections=lambda: len(self._connections),
        )

    @property
    def forwarding(self) -> bool:
        """Cluster mode: connections to agents another node owns are forwarded."""
        return self.forwarder is not None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ws://{host}:{self.port}"

    async def start(self) -> None:
        """Listen; when this returns, connections are accepted and ``port`` is the real one.

        First takes the memory dir's ``server.lock`` (flock, held until ``stop()``): a
        second server on a memory dir another server holds raises ``MemoryDirInUseError``
        naming the dir, instead of starting and failing every request for the agents the
        first one holds. The kernel drops the lock when the holder dies. Then removes the
        staging folders no live process holds (``storage.staging``).
        """
        self._lock_fd = lock_memory_dir(self.registry.memory_dir)
        try:
            if not self.registry.readonly:
                # Copies a process killed mid-restore or mid-import left in the staging folder.
                await self.registry.executor.run(sweep_staging, self.registry.memory_dir)
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
            process_request=(self._process_request if self.forwarder is None else self._front_door),
            select_subprotocol=select_subprotocol,
            max_size=self.max_frame_bytes,
            # Frames buffered by websockets before we read them: few, they may be large.
            max_queue=4,
            # No permessage-deflate: (de)compressing a 16 MiB frame takes the event loop
            # for a few hundred ms (every client stalls), and each compressed connection
            # keeps zlib buffers; the server's peers are local or on a fast network.
            compression=None,
            logger=quiet_client_handshake_failures(redacting_logger("websockets.server")),
            # No answer names the Python or websockets version.
            server_header=None,
            open_timeout=self.handshake_timeout,
            process_response=self._process_response,
            # Malformed heads get a 400/405/414/431 answer, over-long header lines a
            # 401/431 (handshake_guard), not a drop; the gate counts handshakes.
            create_connection=guarded(
                intake_connection(
                    self.permits,
                    self.intake_held,
                    threshold=self.large_frame_threshold,
                    max_frame=self.max_frame_bytes,
                    hold_timeout=self.large_frame_hold_timeout,
                ),
                self.gate,
            ),
        )
        sockets = self._ws.sockets
        if sockets:
            self.port = int(sockets[0].getsockname()[1])

    def remaining_stop_time(self) -> float | None:
        """Seconds left before the stop deadline (``None`` when not stopping)."""
        if self._deadline is None:
            return None
        return max(0.0, self._deadline - asyncio.get_running_loop().time())

    async def stop(self) -> None:
        """Graceful stop within ``stop_timeout``: refuse new connections and requests,
        finish in-flight ones, send their answers, close every connection with 1001;
        at the deadline cancel what still runs and abort what cannot be written. Idempotent."""
        if self._ws is None or self.stopping:
            await self._stopped.wait()
            return
        self.stopping = True
        # The last second is for aborting and closing the listener.
        self._deadline = asyncio.get_running_loop().time() + max(0.0, self.stop_timeout - 1.0)
        self._ws.close(close_connections=False)
        for conn in list(self._connections):
            conn.stop_reading()
        for forwarded in list(self._forwarded):
            forwarded.stop()
        try:
            async with asyncio.timeout(self.stop_timeout):
                await self._ws.wait_closed()
        except TimeoutError:
            log.warning("stop deadline reached: aborting %d connections", len(self.gate.live))
            for ws in list(self.gate.live):
                ws.transport.abort()
            for conn in list(self._connections):
                conn.abort()
            for forwarded in list(self._forwarded):
                forwarded.abort()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
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

    def topic_for(self, actor: AgentActor, session_id: str) -> Topic:
        key = (actor.agent_id, session_id)
        topic = self.topics.get(key)
        if topic is None:
            topic = Topic(self, key)
            topic.unsubscribe = actor.subscribe(
                session_id, topic.on_events, topic.on_deleted, topic.on_rewound
            )
            self.topics[key] = topic
        return topic

    # -- handshake ---------------------------------------------------------------------
    def _evicted(self) -> None:
        self._evictions.note(len(self.gate.pending), self.max_handshakes)

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        if isinstance(connection, GuardedConnection):
            self.gate.decided(connection)
        oversized = getattr(connection, "oversized_header", None)
        if oversized is not None:
            return refuse_oversized(connection, oversized)
        origins = request.headers.get_all("Origin")
        if len(origins) > 1:
            return refuse(
                connection, http.HTTPStatus.BAD_REQUEST, f"Origin: {len(origins)} headers"
            )
        refused = self.origins.refusal(origins[0] if origins else None, request.headers.get("Host"))
        if refused is not None:
            return refuse(connection, http.HTTPStatus.FORBIDDEN, refused)
        public = self.http.public(connection, request)  # the page and /healthz: no token
        if public is not None:
            return public
        if self.stopping:
            return refuse(connection, http.HTTPStatus.SERVICE_UNAVAILABLE, "server shutting down")
        authorizations = request.headers.get_all("Authorization")
        if len(authorizations) > 1:
            return refuse(
                connection,
                http.HTTPStatus.BAD_REQUEST,
                f"Authorization: {len(authorizations)} headers; send exactly one",
            )
        grant: Grant | None = None
        if self.auth.enabled:
            token = token_from_headers(
                authorizations[0] if authorizations else None, offered_subprotocols(request.headers)
            )
            try:
                grant = self.auth.authenticate(token, self.clock())
            except TokenRejectedError as exc:
                return unauthorized(connection, exc.reason)
        path = urlsplit(request.path).path
        if path == "/metrics":
            if grant is not None and not grant.allows("admin"):
                return refuse(connection, http.HTTPStatus.FORBIDDEN, "/metrics needs scope admin")
            if grant is not None and grant.sessions is not None:
                # Server-wide figures: not for a token limited to some sessions.
                return refuse(
                    connection,
                    http.HTTPStatus.FORBIDDEN,
                    "/metrics is not available to a token limited to sessions",
                )
            # A token limited to some agents sees only their series (ops_metrics.agent_view).
            limited = grant is not None and not grant.unrestricted
            return self.http.metrics(connection, grant.permits if limited and grant else None)
        if path in ("/v1", "/v1/"):
            return self._admit(connection, Route(SERVER, None, grant))
        if not path.startswith(AGENT_PREFIX):
            return refuse(
                connection,
                http.HTTPStatus.NOT_FOUND,
                f"unknown path {path[:200]!r}; use /v1/agents/<url-encoded agent_id> or /v1",
            )
        try:
            agent_id = validate_agent_id(unquote(path[len(AGENT_PREFIX) :], errors="strict"))
        except UnicodeDecodeError:
            return refuse(connection, http.HTTPStatus.BAD_REQUEST, "agent_id: not valid UTF-8")
        except InvalidAgentIdError as exc:
            return refuse(connection, http.HTTPStatus.BAD_REQUEST, exc.message)
        if grant is not None and not grant.permits(agent_id):
            return refuse(
                connection, http.HTTPStatus.FORBIDDEN, "this token may not address this agent"
            )
        return self._admit(connection, Route(AGENT, agent_id, grant))

    async def _front_door(self, connection: ServerConnection, request: Request) -> Response | None:
        """The handshake in cluster mode: the single-node checks, then, for an agent
        another node owns, an upstream to that owner (``forwarding.Forwarder``), or its
        refusal. A handshake forwarded by another node (its credential in
        ``FORWARD_HEADER``) is served here or refused with 421, never forwarded again."""
        response = self._process_request(connection, request)
        route = self._routes.get(connection)
        if response is not None or route is None or route.agent_id is None:
            return response
        forwarder = self.forwarder
        assert forwarder is not None  # this handshake is used only with one
        agent_id = route.agent_id
        presented = request.headers.get(FORWARD_HEADER)
        if presented is not None:
            if not credential_valid(self.cluster_secret, agent_id, presented):
                self._routes.pop(connection, None)
                return unauthorized(connection, "invalid node credential")
            try:
                location = await forwarder.directory.locate(agent_id)
            except Exception as exc:
                self._routes.pop(connection, None)
                return _passed_on(connection, unlocated(exc))
            if location is None:
                return None
            self._routes.pop(connection, None)
            return refuse(
                connection,
                MISDIRECTED,
                f"this node is not the owner of this agent (its owner is node "
                f"{location.node_id!r})",
            )
        token = token_from_headers(
            request.headers.get("Authorization"), offered_subprotocols(request.headers)
        )
        opened = await forwarder.open_upstream(agent_id, token)
        if opened is None:
            return None
        if isinstance(opened, OwnerRefusal):
            self._routes.pop(connection, None)
            return _passed_on(connection, opened)
        if self.stopping:  # stop() began while the upstream opened
            self._routes.pop(connection, None)
            await opened.close()
            return refuse(connection, http.HTTPStatus.SERVICE_UNAVAILABLE, "server shutting down")
        self._upstreams[connection] = opened
        # Closed if the client's handshake fails after this (no handler will take it).
        connection.connection_lost_waiter.add_done_callback(
            lambda _lost: self._drop_upstream(connection)
        )
        return None

    def _drop_upstream(self, connection: ServerConnection) -> None:
        upstream = self._upstreams.pop(connection, None)
        if upstream is not None:
            upstream.transport.abort()

    async def _forward(
        self, ws: IntakeConnection, route: Route, upstream: ClientConnection
    ) -> None:
        assert self.forwarder is not None and route.agent_id is not None
        forwarded = ForwardedConnection(
            ws,
            upstream,
            route.agent_id,
            self.forwarder,
            permits=self.permits,
            write_timeout=self.write_timeout,
            remaining_stop_time=self.remaining_stop_time,
        )
        self._forwarded.add(forwarded)
        self.registry.operations.open_connections.inc()
        try:
            if self.stopping:
                forwarded.stop()
            await forwarded.run()
        finally:
            self._forwarded.discard(forwarded)
            self.registry.operations.open_connections.dec()

    def _admit(self, connection: ServerConnection, route: Route) -> Response | None:
        """Take a connection slot for a handshake that passed every check, or 503."""
        if isinstance(connection, GuardedConnection) and not self.gate.admit(connection):
            self._refusals.note(len(self.gate.admitted), self.max_connections)
            response = refuse(
                connection,
                http.HTTPStatus.SERVICE_UNAVAILABLE,
                f"too many connections (max_connections {self.max_connections}); retry later",
            )
            response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
            return response
        self._routes[connection] = route
        return None

    def _process_response(
        self, connection: ServerConnection, request: Request, response: Response
    ) -> Response | None:
        """A page of an allowed other origin may read the HTTP answers (CORS)."""
        origin = request.headers.get("Origin")
        if (
            origin is not None
            and response.status_code != http.HTTPStatus.SWITCHING_PROTOCOLS
            and self.origins.cross_origin_allowed(origin)
        ):
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Vary"] = "Origin"
        return None

    async def _handler(self, ws: ServerConnection) -> None:
        route = self._routes.pop(ws, None)
        if route is None or not isinstance(ws, IntakeConnection):  # cannot happen
            await ws.close(1011, "no route")
            return
        if self.forwarder is not None:
            upstream = self._upstreams.pop(ws, None)
            if upstream is not None:
                await self._forward(ws, route, upstream)
                return
        conn = Connection(self, ws, route)
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
RETRY_AFTER_SECONDS: Final = 1
"""What a 503 for a full server tells the client to wait before it tries again."""


def _passed_on(connection: ServerConnection, refusal: OwnerRefusal) -> Response:
    """The owner's refusal of a forwarded handshake, as the client's answer."""
    response = connection.respond(http.HTTPStatus(refusal.status), refusal.body)
    if refusal.retry_after is not None:
        response.headers["Retry-After"] = refusal.retry_after
    if refusal.www_authenticate is not None:
        response.headers["WWW-Authenticate"] = refusal.www_authenticate
    return response


def lock_memory_dir(memory_dir: Path) -> int:
    """Take ``memory_dir/server.lock`` exclusively (flock); return the open descriptor."""
    make_dir(memory_dir)
    path = memory_dir / SERVER_LOCK_FILE
    fd = try_exclusive_lock(path)
    if fd is None:
        raise MemoryDirInUseError(
            f"memory dir {str(memory_dir)!r} is held by another session-server "
            f"({path} is locked); stop that server or use another --memory-dir",
            data={"memory_dir": str(memory_dir)},
        )
    return fd
