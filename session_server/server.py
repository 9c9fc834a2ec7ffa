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
from websockets.http11 import MAX_LINE_LENGTH, Request, Response
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
from .budget import ByteBudget
from .core.agent_ids import validate_agent_id
from .core.errors import (
    InvalidAgentIdError,
    InvalidRequestError,
    MemoryDirInUseError,
    NotFoundError,
    SessionServerError,
    TooLargeError,
)
from .core.events import SessionEvent
from .handshake_guard import guarded
from .http_routes import HttpRoutes
from .intake import FramePermits, IntakeConnection, intake_connection
from .limits import derive_limits
from .log_redact import redacting_logger
from .rpc.methods import AGENT, SERVER, CallContext, Endpoint, MethodSpec, dispatch
from .rpc.protocol import (
    DEFAULT_MAX_FRAME_BYTES,
    Frame,
    Invalid,
    encode_message,
    encode_pieces,
    error_response,
    notification,
    parse_frame,
)
from .rpc.protocol import Request as RpcRequest
from .rpc.table import BUILTIN_METHODS
from .storage.file_lock import try_exclusive_lock
from .storage.file_modes import make_dir

if TYPE_CHECKING:
    from .runtime.actor import AgentActor
    from .runtime.registry import ActorRegistry

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "JSONRPC_SUBPROTOCOL",
    "SERVER_LOCK_FILE",
    "SessionServer",
    "lock_memory_dir",
    "quiet_accept_errors",
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


FANOUT_SLICE = 2
"""Subscribers served per event-loop step of a fan-out: the writer's answer (and every
other client) waits for one slice at most, not for the whole fan-out."""


class _Topic:
    """One actor subscription per (agent, session) for all of this server's subscribers.

    The actor calls ``on_events`` on the writer's path; that only queues the events. The
    fan-out runs in later loop steps, ``FANOUT_SLICE`` subscribers per step, so neither
    the append's answer nor other clients wait behind a thousand subscribers. Events that
    commit during a fan-out go out together in the next round (one notification, encoded
    once for every subscriber); a deletion goes out after the events before it.
    """

    __slots__ = ("deleted", "key", "pending", "running", "server", "subs", "unsubscribe")

    def __init__(self, server: SessionServer, key: tuple[str, str]) -> None:
        self.server = server
        self.key = key
        self.subs: list[_Subscription] = []
        self.unsubscribe: Callable[[], None] = lambda: None
        self.pending: list[SessionEvent] = []
        self.deleted = False
        self.running = False

    def on_events(self, events: list[SessionEvent]) -> None:
        if events:
            self.pending.extend(events)
            self._kick()

    def on_deleted(self) -> None:
        self.deleted = True
        self._kick()

    def _kick(self) -> None:
        if not self.running:
            self.running = True
            asyncio.get_running_loop().call_soon(self._round)

    def _round(self) -> None:
        if self.pending:
            events, self.pending = self.pending, []
            self._step(events, _appended(self.key[1], events), list(self.subs), 0)
            return
        self.running = False
        if self.deleted:
            for sub in list(self.subs):
                sub.on_deleted()

    def _step(
        self, events: list[SessionEvent], payload: bytes, subs: list[_Subscription], start: int
    ) -> None:
        end = start + FANOUT_SLICE
        for sub in subs[start:end]:
            if sub.topic is not self:  # unsubscribed since the round began
                continue
            if not sub.live:
                sub.hold(events)
            elif events[0].seq > sub.floor:
                sub.deliver(payload, events[0].seq, events[-1].seq)
            else:  # overlaps what the subscribe answer already covered
                sub.deliver_events(events)
        loop = asyncio.get_running_loop()
        if end < len(subs):
            loop.call_soon(self._step, events, payload, subs, end)
        else:
            loop.call_soon(self._round)

    def remove(self, sub: _Subscription) -> None:
        with contextlib.suppress(ValueError):
            self.subs.remove(sub)
        if not self.subs:
            self.server.topics.pop(self.key, None)
            try:
                self.unsubscribe()
            except Exception:
                log.exception("unsubscribe from %r failed", self.key)


def _appended(session_id: str, events: list[SessionEvent]) -> bytes:
    return encode_message(
        notification("events.appended", {"session_id": session_id, "events": events})
    )


class _Subscription:
    """One connection's subscription to one session.

    Events are held until the subscribe answer is queued. Then the past (the events
    after the caller's ``after_seq``) is replayed page by page (``_replay``), then events
    with seq > ``floor`` go out as ``events.appended`` notifications; ``session.deleted``
    ends it. At most ``max_subscriber_bytes`` of notifications wait to be written (one
    always may, whatever its size); beyond that the subscriber has fallen behind: further
    events are dropped and, once what was queued is written, one ``events.gap
    {session_id, from_seq, to_seq}`` notification names the seqs it missed (read them
    with ``events.load``), then notifications resume.

    Memory stays bounded however long the history and whatever the writers do: a replay
    page holds at most ``REPLAY_BATCH`` events and about ``max_subscriber_bytes`` bytes,
    and the next page is read only once the previous one is written. Events committed
    while it replays are held up to ``REPLAY_BATCH``; past that they are dropped and the
    replay reads them back from SQLite instead (it goes live only after a page read that
    reached the end with nothing dropped since it began).
    """

    __slots__ = (
        "actor",
        "buffer",
        "conn",
        "deleted",
        "drained",
        "floor",
        "gap",
        "live",
        "overflowed",
        "pump",
        "queued",
        "replay_from",
        "session_id",
        "topic",
    )

    def __init__(self, conn: _Connection, session_id: str) -> None:
        self.conn = conn
        self.session_id = session_id
        self.floor = 0
        self.live = False
        self.deleted = False
        self.buffer: list[SessionEvent] = []
        self.overflowed = False
        self.replay_from: int | None = None
        self.actor: AgentActor | None = None
        self.pump: asyncio.Task[None] | None = None
        self.queued = 0
        self.drained = asyncio.Event()
        self.drained.set()
        self.gap: tuple[int, int] | None = None
        self.topic: _Topic | None = None

    def hold(self, events: list[SessionEvent]) -> None:
        """Keep events committed before this subscription is live (bounded; see above)."""
        if self.overflowed:
            return
        self.buffer.extend(events)
        if len(self.buffer) > REPLAY_BATCH:
            self.buffer = []
            self.overflowed = True

    def deliver(self, payload: bytes, first: int, last: int) -> None:
        if self.gap is not None:
            self.gap = (self.gap[0], last)
        elif self.queued and self.queued + len(payload) > self.conn.server.max_subscriber_bytes:
            self.gap = (first, last)
        else:
            self._send(payload)
        self.floor = max(self.floor, last)

    def deliver_events(self, events: list[SessionEvent]) -> None:
        pending = [e for e in events if e.seq > self.floor]
        if pending:
            self.deliver(_appended(self.session_id, pending), pending[0].seq, pending[-1].seq)

    def _send(self, payload: bytes) -> None:
        size = len(payload)
        self.queued += size
        self.drained.clear()
        self.conn.send(payload, lambda: self._written(size))

    def _written(self, size: int) -> None:
        self.queued -= size
        if self.queued == 0:
            self.drained.set()
            self._send_gap()

    def _send_gap(self) -> None:
        """Name the seqs missed, once everything queued before is written."""
        if self.queued == 0 and self.gap is not None and self.live:
            first, last = self.gap
            self.gap = None
            self._send(
                encode_message(
                    notification(
                        "events.gap",
                        {"session_id": self.session_id, "from_seq": first, "to_seq": last},
                    )
                )
            )

    def on_deleted(self) -> None:
        self.deleted = True
        if self.live:
            self._end()

    def _end(self) -> None:
        self.conn.send(
            encode_message(notification("session.deleted", {"session_id": self.session_id}))
        )
        self.conn.unsubscribe(self.session_id)

    def go_live(self) -> None:
        """The subscribe answer is queued: replay the past, then go live."""
        if self.live or self.pump is not None:
            return
        if self.replay_from is None and not self.overflowed:
            self._open()
            return
        start = self.floor if self.replay_from is None else self.replay_from
        self.pump = asyncio.create_task(self._replay(start))

    def _open(self) -> None:
        held, self.buffer = self.buffer, []
        self.live = True
        self.deliver_events(held)
        if self.deleted:
            self._end()

    async def _replay(self, cursor: int) -> None:
        """Send the events after ``cursor`` a page at a time, each once the previous one
        is written, until a read reaches the end with no held event dropped meanwhile."""
        actor = self.actor
        assert actor is not None
        server = self.conn.server
        try:
            while True:
                self.overflowed = False
                page, complete = await actor.load_events_bounded(
                    self.session_id,
                    max_bytes=server.max_subscriber_bytes,
                    limit=REPLAY_BATCH,
                    tail=False,
                    after_seq=cursor,
                )
                at_end = complete and len(page) < REPLAY_BATCH
                if page:
                    cursor = page[-1].seq
                    self.floor = max(self.floor, cursor)
                    self._send(_appended(self.session_id, page))
                    del page
                if at_end and not self.overflowed:
                    break
                await self.drained.wait()
        except Exception as exc:
            # The agent became unavailable: say what was missed, then carry on live.
            log.warning("replay of session %r stopped: %r", self.session_id, exc)
            if self.floor > cursor:
                self.gap = (cursor + 1, self.floor)
        self.pump = None
        self._open()
        self._send_gap()


class _Connection:
    """One client connection: reader, per-frame tasks, ordered writer, subscriptions.

    Bounds (see ``SessionServer``): a frame takes a slot of the in-flight window before
    it is read and gives it back only when its answer has been written, so a client that
    does not read its answers stops being read after ``max_inflight`` frames; reading
    also pauses while more than ``max_outgoing_bytes`` wait to be written.
    """

    def __init__(self, server: SessionServer, ws: IntakeConnection, route: _Route) -> None:
        self.server = server
        self.ws = ws
        self.route = route
        self.outgoing: deque[tuple[bytes, Callable[[], None] | None]] = deque()
        self.outgoing_bytes = 0
        self.writable = asyncio.Event()
        self.writable.set()
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
    def send(self, data: bytes, on_written: Callable[[], None] | None = None) -> None:
        """Queue ``data``; it is written after everything queued before it, then
        ``on_written`` runs (also when the connection closed and it was dropped)."""
        if self.closed:
            if on_written is not None:
                on_written()
            return
        self.outgoing.append((data, on_written))
        self.outgoing_bytes += len(data)
        if self.outgoing_bytes > self.server.max_outgoing_bytes:
            self.writable.clear()
        if not self.writing:
            self._spawn_flush()

    def _spawn_flush(self) -> None:
        self.writing = True
        task = asyncio.create_task(self._flush())
        self.flushers.add(task)
        task.add_done_callback(self.flushers.discard)

    async def _flush(self) -> None:
        try:
            while self.outgoing:
                data, on_written = self.outgoing[0]
                try:
                    if not self.closed:
                        await self.ws.send(data, text=True)
                except ConnectionClosed:
                    self.closed = True
                finally:
                    self.outgoing.popleft()
                    self.outgoing_bytes -= len(data)
                    if self.outgoing_bytes <= self.server.max_outgoing_bytes:
                        self.writable.set()
                    if on_written is not None:
                        on_written()
        finally:
            self.writing = False
            if self.outgoing and not self.closed:
                self._spawn_flush()

    def _drop_outgoing(self) -> None:
        """Forget unwritten messages (the connection is being aborted)."""
        self.closed = True
        while self.outgoing:
            data, on_written = self.outgoing.popleft()
            self.outgoing_bytes -= len(data)
            if on_written is not None:
                on_written()
        self.writable.set()

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
        if len(self.subscriptions) >= self.server.max_subscriptions:
            raise TooLargeError(
                f"session_id: this connection already has {len(self.subscriptions)} "
                f"subscriptions (the maximum); unsubscribe first or use another connection",
                data={"field": "session_id", "max_subscriptions": self.server.max_subscriptions},
            )
        sub = _Subscription(self, session_id)
        self.subscriptions[session_id] = sub
        try:
            # Registered before the reads: an append committed meanwhile is buffered, and
            # the seq floor below drops what the reads already hold (no gap, no duplicate).
            sub.topic = self.server.topic_for(actor, session_id)
            sub.topic.subs.append(sub)
            row = await actor.get_session(session_id)
            if row is None:
                raise NotFoundError.session(session_id)
            last_seq = int(row["last_seq"])
            if after_seq is not None and after_seq < last_seq:
                sub.replay_from = after_seq  # read page by page once the answer is out
                sub.actor = actor
        except BaseException:
            self._drop(sub)
            raise
        sub.floor = last_seq
        ctx.after_response(sub.go_live)
        return last_seq

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
        if sub.pump is not None:
            sub.pump.cancel()
            sub.pump = None
        if sub.topic is not None:
            sub.topic.remove(sub)
            sub.topic = None

    # -- requests -----------------------------------------------------------------------
    def _context(self) -> CallContext:
        return CallContext(
            self.server.registry,
            self.route.agent_id,
            self,
            self.route.grant,
            max_answer_bytes=self.server.max_answer_bytes,
        )

    def _parse(self, data: bytes, text: bool) -> Frame | bytes | None:
        """The frame, or the encoded answer to a frame that does not parse (None: a text
        frame that is not UTF-8, which fails the connection with 1007 as RFC 6455 asks)."""
        try:
            return parse_frame(data)
        except SessionServerError as exc:
            if text and not _is_utf8(data):
                self.stop_reading()
                task = asyncio.create_task(self.ws.close(1007, "invalid UTF-8 in a text frame"))
                self.flushers.add(task)
                task.add_done_callback(self.flushers.discard)
                return None
            return encode_message(error_response(None, exc))

    async def _answer(self, frame: Frame) -> tuple[bytes | None, list[CallContext]]:
        """Run one parsed frame; return its encoded answer (None: nothing to send)."""
        grant = self.route.grant
        if self.revoked or (grant is not None and grant.expired(self.server.clock())):
            return self._refuse_expired(frame), []
        endpoint = self.route.endpoint
        methods = self.server.methods
        limit = self.server.max_answer_bytes
        if not frame.batch:
            ctx = self._context()
            response = await dispatch(frame.items[0], ctx, endpoint, methods, self.observe)
            if response is None:
                return None, [ctx]
            return await _bounded(response, frame.items[0], limit), [ctx]
        if len(frame.items) > self.server.max_batch:
            error = InvalidRequestError(
                f"Invalid Request: a batch of {len(frame.items)} requests exceeds the "
                f"maximum of {self.server.max_batch}; split it",
                data={"max_batch": self.server.max_batch},
            )
            return encode_message(error_response(None, error)), []
        # One request at a time: a batch holds one slot of the window and at most one
        # result in memory besides its encoded answers, which stay under the bound.
        contexts: list[CallContext] = []
        parts: list[bytes] = []
        size = 2
        for item in frame.items:
            ctx = self._context()
            contexts.append(ctx)
            response = await dispatch(item, ctx, endpoint, methods, self.observe)
            if response is None:
                continue
            part = await _bounded(response, item, limit - size)
            size += len(part) + 1
            parts.append(part)
        if not parts:
            return None, contexts
        # One copy of what may be max_answer_bytes (joining, then adding the brackets,
        # would copy it three times on the event loop).
        pieces = [b"["]
        for part in parts:
            pieces += (part, b",")
        pieces[-1] = b"]"
        return b"".join(pieces), contexts

    async def _handle(self, data: bytes, text: bool, token: int, permit: bool) -> None:
        answer: bytes | None = None
        contexts: list[CallContext] = []
        try:
            try:
                parsed = self._parse(data, text)
                del data  # the raw bytes go now, not when the request is done
                if isinstance(parsed, Frame):
                    answer, contexts = await self._answer(parsed)
                else:
                    answer = parsed
                del parsed
            finally:
                self.server.budget.release(token)
                if permit:
                    self.server.permits.release()
        except Exception:  # dispatch answers every error; this is a last resort
            log.exception("unexpected failure handling a frame")
        finally:
            if answer is None:
                self.slots.release()
            else:
                self.send(answer, self.slots.release)
            for ctx in contexts:
                for callback in ctx.after:
                    callback()

    async def _read(self) -> None:
        idle = self.server.idle_timeout
        try:
            while True:
                await self.slots.acquire()
                await self.writable.wait()
                self.ws.ready(True)
                try:
                    data = await self._recv(idle)
                    text, permit = await self.ws.claim(len(data))
                except BaseException:
                    self.slots.release()
                    raise
                finally:
                    self.ws.ready(False)
                try:
                    token = await self.server.budget.acquire(len(data))
                except BaseException:
                    if permit:
                        self.server.permits.release()
                    raise
                task = asyncio.create_task(self._handle(data, text, token, permit))
                del data
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
        except ConnectionClosed:
            pass
        finally:
            self.ws.end()

    async def _recv(self, idle: float | None) -> bytes:
        """The next message as bytes, text frames too (parsed as UTF-8 JSON without a
        decoded copy); close the connection when it stays idle (no frame, nothing in
        flight, no subscription) for ``idle`` seconds."""
        while True:
            try:
                async with asyncio.timeout(idle):
                    return await self.ws.recv(decode=False)
            except TimeoutError:
                if self.subscriptions or self.tasks or self.outgoing:
                    continue
                log.info("closing a connection idle for %ss", idle)
                await self.ws.close(1000, "idle timeout")
                raise ConnectionClosed(None, None) from None

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

    def _refuse_expired(self, frame: Frame) -> bytes | None:
        """The answer to every request of ``frame``: -32003 (the token is no longer
        valid); the connection is closed after it."""
        error = TokenRejectedError(self.revoked or REASON_EXPIRED)
        self.revoke(error.reason)
        answers = [error_response(i.id, error) for i in frame.items if not i.notification]
        if not answers:
            return None
        return encode_message(answers if frame.batch else answers[0])

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
            await self._finish()

    async def _finish(self) -> None:
        """Let handlers finish and answers go out, within the server's stop deadline;
        whatever is left then is cancelled and the connection aborted."""
        if self.tasks:
            _done, pending = await asyncio.wait(
                set(self.tasks), timeout=self.server.remaining_stop_time()
            )
            for task in pending:
                log.warning("cancelling a request still running at the stop deadline")
                task.cancel()
            if pending:
                await asyncio.wait(pending)
        if self.flushers:
            _done, unwritten = await asyncio.wait(
                set(self.flushers), timeout=self.server.remaining_stop_time()
            )
            if unwritten:
                self.abort()
                return
        if self.server.stopping:
            code, reason = 1001, "server shutting down"
        elif self.revoked is not None:
            code, reason = 1008, self.revoked
        else:
            return
        try:
            async with asyncio.timeout(self.server.remaining_stop_time()):
                await self.ws.close(code, reason)
        except TimeoutError:
            self.abort()

    def abort(self) -> None:
        """Drop the TCP connection now (a client that does not read blocks a clean close)."""
        self._drop_outgoing()
        for task in list(self.flushers):
            task.cancel()
        self.ws.transport.abort()

    def stop_reading(self) -> None:
        self.stop_requested = True
        if self.reader is not None:
            self.reader.cancel()


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


ENCODE_SLICE: Final = 0.002
"""Seconds of answer encoding between two yields to the event loop."""


async def _bounded(response: dict[str, Any], item: RpcRequest | Invalid, limit: int) -> bytes:
    """``response`` encoded, or a -32004 answer when it would exceed ``limit`` bytes.

    Encoded in pieces (``encode_pieces``), yielding to the loop every ``ENCODE_SLICE``
    seconds: a 16 MiB answer never holds the loop (or the GIL) for the whole encoding,
    and encoding stops as soon as the bound is passed.
    """
    parts: list[bytes] = []
    size = 0
    mark = time.perf_counter()
    for piece in encode_pieces(response):
        size += len(piece)
        if size > limit:
            break
        parts.append(piece)
        if time.perf_counter() - mark > ENCODE_SLICE:
            await asyncio.sleep(0)
            mark = time.perf_counter()
    else:
        return b"".join(parts)
    del parts
    error = TooLargeError(
        f"the answer would be more than {size} bytes, more than the server sends at once "
        f"({limit} bytes left of max_answer_bytes); ask for less (limit, paging)",
        data={"answer_bytes": size, "max_answer_bytes": limit},
    )
    return encode_message(error_response(item.id, error))


class SessionServer:
    """Serve ``registry`` over WebSocket JSON-RPC 2.0.

    The caller owns the registry (and closes it after ``stop()``). ``auth`` (or, shorter,
    ``tokens``: static tokens only) decides what a token allows; neither means no
    authentication. ``clock`` (seconds since the epoch) is what token expiry is checked
    against. ``port=0`` lets the system choose; ``port``/``url`` tell which.
    Usable as ``async with SessionServer(...) as server:`` (start/stop).

    Bounds on what clients control (each documented in docs/server.md):

    - ``max_frame_bytes``: largest frame (bigger: close 1009);
    - ``max_inflight`` frames per connection whose answer is not yet written;
    - ``max_outgoing_bytes`` per connection waiting to be written before reading pauses;
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
    - ``max_connections`` (default derived from ``RLIMIT_NOFILE``): more get HTTP 503;
    - ``idle_timeout``: a connection with no frame, nothing in flight and no subscription
      for that long is closed (1000);
    - ``stop_timeout``: ``stop()`` returns within about this many seconds whatever the
      clients do (requests still running are cancelled, unwritable connections aborted).
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
        max_outgoing_bytes: int = 8 * 1024 * 1024,
        max_batch: int = 64,
        max_answer_bytes: int | None = None,
        max_request_bytes: int | None = None,
        large_frame_threshold: int = 1024 * 1024,
        large_frame_permits: int | None = None,
        large_frame_hold_timeout: float | None = 30.0,
        max_subscriber_bytes: int = 1024 * 1024,
        max_subscriptions: int = 256,
        max_connections: int | None = None,
        idle_timeout: float | None = 300.0,
        stop_timeout: float = 10.0,
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
        self.max_inflight = max(1, max_inflight)
        self.max_outgoing_bytes = max_outgoing_bytes
        self.max_batch = max(1, max_batch)
        self.max_answer_bytes = max_answer_bytes or max(max_frame_bytes, 1024 * 1024)
        # Two maximal frames at once (large frames may hold half the budget), the other
        # half for ordinary requests.
        self.budget = ByteBudget(max_request_bytes or 4 * max_frame_bytes)
        # Messages over the threshold are received under a permit (``intake``): as many
        # maximal frames as the budget's large share holds, so a permit holder never
        # waits for the large share.
        self.large_frame_threshold = max(1, min(large_frame_threshold, max_frame_bytes))
        self.large_frame_hold_timeout = large_frame_hold_timeout
        self.permits = FramePermits(
            large_frame_permits or max(1, self.budget.large_limit // max(1, max_frame_bytes))
        )
        ops = registry.operations
        ops.intake_bytes.set_function(lambda: self.permits.held)
        ops.intake_bytes_peak.set_function(lambda: self.permits.held_peak)
        ops.frame_permits.set_function(lambda: self.permits.count)
        ops.frame_permits_in_use.set_function(lambda: self.permits.in_use)
        ops.frame_permits_peak.set_function(lambda: self.permits.peak)
        self.max_subscriber_bytes = max_subscriber_bytes
        self.max_subscriptions = max_subscriptions
        self.max_connections = max_connections or derive_limits().max_connections
        self.idle_timeout = idle_timeout
        self.stop_timeout = stop_timeout
        self.stopping = False
        self._deadline: float | None = None
        self.topics: dict[tuple[str, str], _Topic] = {}
        self._refusals = _RateLimitedLog(
            "refusing connections: %d open, the maximum is %d (max_connections); "
            "%d refused in the last %.0f s"
        )
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
            # Frames buffered by websockets before we read them: few, they may be large.
            max_queue=4,
            # No permessage-deflate: (de)compressing a 16 MiB frame takes the event loop
            # for a few hundred ms (every client stalls), and each compressed connection
            # keeps zlib buffers; the server's peers are local or on a fast network.
            compression=None,
            logger=redacting_logger("websockets.server"),
            # Over-long header lines get a 401/431 answer (handshake_guard), not a drop.
            create_connection=guarded(
                intake_connection(
                    self.permits,
                    threshold=self.large_frame_threshold,
                    max_frame=self.max_frame_bytes,
                    hold_timeout=self.large_frame_hold_timeout,
                )
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
        try:
            async with asyncio.timeout(self.stop_timeout):
                await self._ws.wait_closed()
        except TimeoutError:
            log.warning("stop deadline reached: aborting %d connections", len(self._ws.handlers))
            for ws in list(self._ws.handlers):
                ws.transport.abort()
            for conn in list(self._connections):
                conn.abort()
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

    def topic_for(self, actor: AgentActor, session_id: str) -> _Topic:
        key = (actor.agent_id, session_id)
        topic = self.topics.get(key)
        if topic is None:
            topic = _Topic(self, key)
            topic.unsubscribe = actor.subscribe(session_id, topic.on_events, topic.on_deleted)
            self.topics[key] = topic
        return topic

    # -- handshake ---------------------------------------------------------------------
    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        oversized = getattr(connection, "oversized_header", None)
        if oversized is not None:
            return _oversized(connection, oversized)
        public = self.http.public(connection, request)  # the page and /healthz: no token
        if public is not None:
            return public
        if self.stopping:
            return _refuse(connection, http.HTTPStatus.SERVICE_UNAVAILABLE, "server shutting down")
        open_now = len(self._ws.handlers) if self._ws is not None else 0
        if open_now > self.max_connections:  # this handshake is one of the handlers
            self._refusals.note(open_now - 1, self.max_connections)
            response = _refuse(
                connection,
                http.HTTPStatus.SERVICE_UNAVAILABLE,
                f"too many connections (max_connections {self.max_connections}); retry later",
            )
            response.headers["Retry-After"] = "1"
            return response
        authorizations = request.headers.get_all("Authorization")
        if len(authorizations) > 1:
            return _refuse(
                connection,
                http.HTTPStatus.BAD_REQUEST,
                f"Authorization: {len(authorizations)} headers; send exactly one",
            )
        grant: Grant | None = None
        if self.auth.enabled:
            token = token_from_headers(
                authorizations[0] if authorizations else None, _offered(request.headers)
            )
            try:
                grant = self.auth.authenticate(token, self.clock())
            except TokenRejectedError as exc:
                return _unauthorized(connection, exc.reason)
        path = urlsplit(request.path).path
        if path == "/metrics":
            if grant is not None and not grant.allows("admin"):
                return _refuse(connection, http.HTTPStatus.FORBIDDEN, "/metrics needs scope admin")
            if grant is not None and grant.sessions is not None:
                # Server-wide figures: not for a token limited to some sessions.
                return _refuse(
                    connection,
                    http.HTTPStatus.FORBIDDEN,
                    "/metrics is not available to a token limited to sessions",
                )
            # A token limited to some agents sees only their series (ops_metrics.agent_view).
            limited = grant is not None and not grant.unrestricted
            return self.http.metrics(connection, grant.permits if limited and grant else None)
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
        if route is None or not isinstance(ws, IntakeConnection):  # cannot happen
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


class _RateLimitedLog:
    """One warning per ``interval`` seconds for a repeated event, with a count."""

    def __init__(self, template: str, interval: float = 10.0) -> None:
        self.template = template
        self.interval = interval
        self.count = 0
        self.last = -float("inf")

    def note(self, *args: Any) -> None:
        self.count += 1
        now = time.monotonic()
        if now - self.last >= self.interval:
            log.warning(self.template, *args, self.count, self.interval)
            self.last = now
            self.count = 0


_accept_errors = _RateLimitedLog(
    "cannot accept connections: %s (the process is out of file descriptors?); "
    "%d such errors in the last %.0f s"
)


def quiet_accept_errors(loop: asyncio.AbstractEventLoop) -> None:
    """Log asyncio's "socket.accept() out of system resource" (EMFILE at accept) as one
    line per interval, without a traceback; every other loop error as before."""

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if str(context.get("message", "")).startswith("socket.accept() out of system"):
            _accept_errors.note(repr(context.get("exception")))
            return
        loop.default_exception_handler(context)

    loop.set_exception_handler(handler)


def _refuse(connection: ServerConnection, status: http.HTTPStatus, text: str) -> Response:
    return connection.respond(status, f"{status.value} {status.phrase}: {text}\n")


def _oversized(connection: ServerConnection, header: str) -> Response:
    """The answer to a request with a header line over websockets' line limit."""
    if header == "authorization":
        return _unauthorized(
            connection, f"token too long (the Authorization header is over {MAX_LINE_LENGTH} bytes)"
        )
    return _refuse(
        connection,
        http.HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
        f"header {header!r} is over {MAX_LINE_LENGTH} bytes",
    )


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
