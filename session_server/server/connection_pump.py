"""One client connection: the reader, a task per frame, the ordered writer.

``Connection`` reads frames within the connection bounds (the in-flight window, the
outgoing bytes, the request budget and the large-frame permits), handles each frame in
its own task (``rpc.dispatch.dispatch``), writes answers and notifications through one
FIFO, holds the connection's subscriptions (``connection_subscriptions``, a collaborator),
watches its token's lifetime, and closes within the server's stop deadline.
``ConnectionHost`` (``connection_host``) is what it needs of the server
(``SessionServer`` is one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final, TypeVar

from websockets.exceptions import ConnectionClosed

from ..auth.tokens import REASON_EXPIRED, Grant, TokenRejectedError
from ..concurrency.eager_tasks import create_task_eagerly
from ..concurrency.flow import ByteBudget, Permits, WouldBlock
from ..rpc.dispatch import dispatch
from ..rpc.method_spec import CallContext
from ..rpc.protocol import Frame, encode_message, encode_small, error_response, parse_frame
from ..values.errors import InvalidRequestError, SessionServerError
from ..values.forwarding import CLOSE_TRY_AGAIN, not_owner_answer
from .answers import answer_reservation, encode_bounded, is_utf8
from .connection_host import ConnectionHost
from .connection_subscriptions import ConnectionSubscriptions
from .handshake import Route
from .intake import IntakeConnection

if TYPE_CHECKING:
    from ..runtime.actor import AgentActor

__all__ = ["Connection", "idle_check_at", "subscriptions_moved"]

# The server's one logger name, whichever module logs: operators filter on it.
log = logging.getLogger("session_server.server")

T = TypeVar("T")

OFF_LOOP_FRAME_BYTES: Final = 64 * 1024
"""Frames at least this big are parsed, range-checked and validated on a worker thread:
that work is linear in the frame (a 16 MiB frame of small items took 0.3 to 1.5 s of
the event loop, 160 kB of 10,000 small events about 15 ms), and a worker round trip
costs about 0.1 ms."""


DIRECT_WRITE_BYTES: Final = 32 * 1024
"""Answers up to this size are written at once when nothing is queued (no task): larger
ones go through the queue, where they count against the unread-answer budgets until the
socket took them, so a client that does not read is stopped by its first large answer."""

Held = tuple[int, int]
"""What a queued message holds of the unread-answer budgets: the tokens of the
connection's share and of the server-wide budget (``ByteBudget``)."""


def idle_check_at(now: float, last_frame_at: float, idle: float, busy: bool) -> float | None:
    """When the idle watchdog looks again, or ``None``: close the connection now.

    Idle means no frame for ``idle`` seconds and nothing in flight; a connection that is
    ``busy`` (a request, an answer or a subscription) is looked at again a whole ``idle``
    later, as one that sent a frame since is at ``idle`` after that frame."""
    due = last_frame_at + idle
    if now < due:
        return due
    if busy:
        return now + idle
    return None


def subscriptions_moved(before: Mapping[str, int] | None, now: Mapping[str, int]) -> bool:
    """Whether a subscription delivered events between two looks of the idle watchdog:
    ``before`` and ``now`` map each subscribed session to the last seq delivered (``None``
    before the first look). A subscription new since the last look counts as moved (it
    came with a frame, and the watchdog has no earlier mark to compare with)."""
    if before is None:
        return bool(now)
    return any(before.get(session_id, -1) < seq for session_id, seq in now.items())


class Connection:
    """One client connection: reader, per-frame tasks, ordered writer, subscriptions.

    Bounds (see ``SessionServer``): a frame takes a slot of the in-flight window before
    it is read and gives it back only when its answer has been written, so a client that
    does not read its answers stops being read after ``max_inflight`` frames.

    Unread answers: everything queued to be written (answers and notifications) counts
    against the connection's share (``answer_room``, ``max_outgoing_bytes``) and the
    server-wide ``answer_budget`` until the socket took it; a frame that may answer up to
    ``max_answer_bytes`` reserves that much of both before it runs
    (``answers.answer_reservation``), and keeps only its encoded answer's size once
    encoded. Reading pauses while the share is full, so a client that does not read stops
    being served: its next requests wait, its frames stay in its socket (TCP
    backpressure), and its memory stays within its share. A message the socket does not
    take within ``write_timeout`` drops the connection.
    """

    def __init__(self, server: ConnectionHost, ws: IntakeConnection, route: Route) -> None:
        self.server = server
        self.ws = ws
        self.route = route
        self.outgoing: deque[tuple[bytes, Callable[[], None] | None, Held]] = deque()
        self.outgoing_bytes = 0
        # The connection's share of the unread-answer bound (one class: every
        # reservation is a whole answer's worth).
        self.answer_room = ByteBudget(server.max_outgoing_bytes, large_share=1.0)
        self.writable = asyncio.Event()
        self.writable.set()
        self.replay_lock = asyncio.Lock()  # subscriptions replay a page at a time
        self.writing = False
        self.flushers: set[asyncio.Task[None]] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.subscriptions = ConnectionSubscriptions(self, server)
        self.observe = server.registry.operations.observe_request
        self.slots = Permits(server.max_inflight)
        self.reader: asyncio.Task[None] | None = None
        self.stop_requested = False
        self.closed = False
        self.revoked: str | None = None  # why the token stopped being valid
        # Cluster mode: an answer saying this node no longer owns the agent ends the
        # connection (1013) so that the client's next handshake reaches the owner.
        self.watch_owner = server.forwarding
        self.owner_moved = False
        self.expiry: asyncio.TimerHandle | None = None
        # The idle timeout: when the last frame came (loop time), the watchdog's timer.
        self.last_frame_at = 0.0
        self.idle_timer: asyncio.TimerHandle | None = None
        # The last seq each subscription had delivered at the watchdog's previous look.
        self.idle_marks: dict[str, int] | None = None

    # -- the unread-answer budgets ---------------------------------------------------------
    def has_room(self, size: int) -> bool:
        """Whether ``size`` more bytes may be queued now without waiting: always when
        nothing is queued (one message always may), else when they fit the connection's
        share and the server-wide budget."""
        if not self.outgoing_bytes:
            return True
        return self.answer_room.fits(size) and self.server.answer_budget.fits(size)

    async def _reserve(self, size: int) -> Held:
        """Reserve ``size`` bytes of the connection's share, then of the server-wide
        budget (always in that order), waiting for room; reading pauses meanwhile when
        the share is full."""
        room = self.answer_room
        try:
            mine = room.acquire_nowait(size)
        except WouldBlock:
            self.writable.clear()  # the reader waits with the request
            try:
                mine = await room.acquire(size)
            finally:
                self._room_changed()  # also when cancelled (the stop deadline)
        self._room_changed()
        try:
            budget = self.server.answer_budget
            try:
                shared = budget.acquire_nowait(size)
            except WouldBlock:
                shared = await budget.acquire(size)
        except BaseException:
            self._give_back((mine, 0))
            raise
        return mine, shared

    def _shrink(self, held: Held, size: int) -> Held:
        """Keep only ``size`` bytes of a reservation (the encoded answer's size)."""
        kept = (
            self.answer_room.shrink(held[0], size),
            self.server.answer_budget.shrink(held[1], size),
        )
        self._room_changed()
        return kept

    def _give_back(self, held: Held | None) -> None:
        if held is None:
            return
        if held[0]:
            self.answer_room.release(held[0])
        if held[1]:
            self.server.answer_budget.release(held[1])
        self._room_changed()

    def _room_changed(self) -> None:
        """Reading goes on while the connection's share has room."""
        room = self.answer_room
        if room.in_use >= room.capacity or room.waiting:
            self.writable.clear()
        else:
            self.writable.set()

    # -- sending (everything goes through one FIFO, in order) -----------------------------
    def send(
        self,
        data: bytes,
        on_written: Callable[[], None] | None = None,
        held: Held | None = None,
    ) -> None:
        """Queue ``data``; it is written after everything queued before it, then
        ``on_written`` runs (also when the connection closed and it was dropped). A small
        message is written at once when nothing is queued and the socket is writable.
        ``held``: what it already holds of the unread-answer budgets (its reservation);
        otherwise its size is counted now (``ByteBudget.acquire_forced``); either is given back
        once the socket took it."""
        if self.closed:
            self._give_back(held)
            if on_written is not None:
                on_written()
            return
        if (
            len(data) <= DIRECT_WRITE_BYTES
            and not self.writing
            and not self.outgoing
            and self.ws.write_now(data)
        ):
            self._give_back(held)
            if on_written is not None:
                on_written()
            return
        if held is None:
            size = len(data)
            held = (
                self.answer_room.acquire_forced(size),
                self.server.answer_budget.acquire_forced(size),
            )
            self._room_changed()
        self.outgoing.append((data, on_written, held))
        self.outgoing_bytes += len(data)
        if not self.writing:
            self._spawn_flush()

    def _spawn_flush(self) -> None:
        self.writing = True
        task = asyncio.create_task(self._flush())
        self.flushers.add(task)
        task.add_done_callback(self.flushers.discard)

    async def _flush(self) -> None:
        timeout = self.server.write_timeout
        try:
            while self.outgoing:
                entry = self.outgoing[0]
                data, on_written, held = entry
                try:
                    if not self.closed:
                        async with asyncio.timeout(timeout):
                            await self.ws.send(data, text=True)
                except ConnectionClosed:
                    self.closed = True
                except TimeoutError:
                    log.warning(
                        "dropping a connection whose socket took no %d-byte message in "
                        "%s s (the client does not read its answers)",
                        len(data),
                        timeout,
                    )
                    self.closed = True
                    self.ws.transport.abort()
                finally:
                    # ``abort`` may have dropped the queue (and given its room back).
                    if self.outgoing and self.outgoing[0] is entry:
                        self.outgoing.popleft()
                        self.outgoing_bytes -= len(data)
                        self._give_back(held)
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
            data, on_written, held = self.outgoing.popleft()
            self.outgoing_bytes -= len(data)
            self._give_back(held)
            if on_written is not None:
                on_written()
        self.writable.set()

    # -- requests -----------------------------------------------------------------------
    def _context(self, frame_bytes: int) -> CallContext:
        return CallContext(
            self.server.registry,
            self.route.agent_id,
            self,
            self.route.grant,
            max_answer_bytes=self.server.max_answer_bytes,
            frame_bytes=frame_bytes,
        )

    async def _off_loop(self, fn: Callable[[], T]) -> T:
        """Run the pure ``fn`` on one of the registry's worker threads."""
        return await self.server.registry.executor.run(fn)

    def _parse(self, data: bytes, text: bool) -> Frame | bytes | None:
        """The frame, or the encoded answer to a frame that does not parse (None: a text
        frame that is not UTF-8, which fails the connection with 1007 as RFC 6455 asks)."""
        try:
            return parse_frame(data)
        except SessionServerError as exc:
            return self._unparsed(data, text, exc)

    async def _parse_off_loop(self, data: bytes, text: bool) -> Frame | bytes | None:
        """``_parse`` with the parsing on a worker thread (a large frame)."""
        try:
            return await self._off_loop(lambda: parse_frame(data))
        except SessionServerError as exc:
            return self._unparsed(data, text, exc)

    def _unparsed(self, data: bytes, text: bool, exc: SessionServerError) -> bytes | None:
        """The answer to a frame that does not parse (see ``_parse``)."""
        if text and not is_utf8(data):
            self.stop_reading()
            task = asyncio.create_task(self.ws.close(1007, "invalid UTF-8 in a text frame"))
            self.flushers.add(task)
            task.add_done_callback(self.flushers.discard)
            return None
        return encode_message(error_response(None, exc))

    async def _answer(
        self, frame: Frame, contexts: list[CallContext], frame_bytes: int, large: bool = False
    ) -> bytes | None:
        """Run one parsed frame of ``frame_bytes`` bytes; return its encoded answer (None:
        nothing to send).
        Each request's context is added to ``contexts`` as it starts, so that its
        ``after`` callbacks (the request's metrics among them) run even when the frame
        fails or is cancelled later. ``large``: the frame's params are checked on a
        worker (``OFF_LOOP_FRAME_BYTES``)."""
        grant = self.route.grant
        if self.revoked or (grant is not None and grant.expired(self.server.clock())):
            return self._refuse_expired(frame)
        endpoint = self.route.endpoint
        methods = self.server.methods
        limit = self.server.max_answer_bytes
        offload: Callable[[Callable[[], Any]], Any] | None = self._off_loop if large else None
        if not frame.batch:
            ctx = self._context(frame_bytes)
            contexts.append(ctx)
            response = await dispatch(frame.items[0], ctx, endpoint, methods, self.observe, offload)
            if response is None:
                return None
            small = encode_small(response)  # most answers: one call, no coroutine
            if small is not None and len(small) <= limit:
                return small
            return await encode_bounded(response, frame.items[0], limit, ctx.refused_too_large)
        if len(frame.items) > self.server.max_batch:
            error = InvalidRequestError(
                f"Invalid Request: a batch of {len(frame.items)} requests exceeds the "
                f"maximum of {self.server.max_batch}; split it",
                data={"max_batch": self.server.max_batch},
            )
            return encode_message(error_response(None, error))
        # One request at a time: a batch holds one slot of the window and at most one
        # result in memory besides its encoded answers, which stay under the bound.
        parts: list[bytes] = []
        answer_bytes = 2  # the brackets
        for item in frame.items:
            ctx = self._context(frame_bytes)
            contexts.append(ctx)
            response = await dispatch(item, ctx, endpoint, methods, self.observe, offload)
            if response is None:
                continue
            part = await encode_bounded(response, item, limit - answer_bytes, ctx.refused_too_large)
            answer_bytes += len(part) + 1
            parts.append(part)
        if not parts:
            return None
        # One copy of what may be max_answer_bytes (joining, then adding the brackets,
        # would copy it three times on the event loop).
        pieces = [b"["]
        for part in parts:
            pieces += (part, b",")
        pieces[-1] = b"]"
        return b"".join(pieces)

    async def _handle(self, data: bytes, text: bool, token: int, permit: bool) -> None:
        answer: bytes | None = None
        held: Held | None = None
        contexts: list[CallContext] = []
        try:
            try:
                size = len(data)
                large = size >= OFF_LOOP_FRAME_BYTES
                if large:
                    parsed = await self._parse_off_loop(data, text)
                else:
                    parsed = self._parse(data, text)
                del data  # the raw bytes go now, not when the request is done
                if isinstance(parsed, Frame):
                    room = answer_reservation(parsed, self.server.max_answer_bytes)
                    if room:
                        held = await self._reserve(room)
                    if self.closed:  # dropped while it waited for room: nobody to answer
                        return
                    answer = await self._answer(parsed, contexts, size, large)
                    if held is not None and answer is not None:
                        held = self._shrink(held, len(answer))
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
                self._give_back(held)
                self.slots.release()
            else:
                self.send(answer, self.slots.release, held)
                if self.watch_owner and not self.owner_moved and not_owner_answer(answer):
                    self.owner_moved = True
                    self.stop_reading()
            for ctx in contexts:
                for callback in ctx.after:
                    try:
                        callback()
                    except Exception:  # one failing callback does not skip the others
                        log.exception("an after-answer callback failed")

    async def _read(self) -> None:
        idle = self.server.idle_timeout
        loop = asyncio.get_running_loop()
        if idle is not None:
            self.last_frame_at = loop.time()
            self.idle_timer = loop.call_at(self.last_frame_at + idle, self._idle_check, idle)
        budget = self.server.budget
        try:
            while True:
                # Each step waits only when it must: a frame of the sequential path
                # costs no coroutine here besides ``recv``.
                try:
                    self.slots.acquire_nowait()
                except WouldBlock:
                    await self.slots.acquire()
                if not self.writable.is_set():
                    await self.writable.wait()
                self.ws.ready(True)
                try:
                    # The next message as bytes, text frames too (parsed as UTF-8 JSON
                    # without a decoded copy).
                    data = await self.ws.recv(decode=False)
                    self.last_frame_at = loop.time()
                    small = self.ws.claim_small(len(data))
                    if small is None:
                        text, permit = await self.ws.claim(len(data))
                    else:
                        text, permit = small, False
                except BaseException:
                    self.slots.release()
                    raise
                finally:
                    self.ws.ready(False)
                try:
                    token = budget.acquire_nowait(len(data))
                except WouldBlock:
                    try:
                        token = await budget.acquire(len(data))
                    except BaseException:
                        if permit:
                            self.server.permits.release()
                        raise
                # Started eagerly where asyncio can: the request runs up to its first
                # wait in this step (a sequential turn's commit starts before the next
                # frame is read); on Python 3.11 a plain task.
                task = create_task_eagerly(loop, self._handle(data, text, token, permit))
                del data
                if not task.done():
                    self.tasks.add(task)
                    task.add_done_callback(self.tasks.discard)
        except ConnectionClosed:
            pass
        finally:
            if self.idle_timer is not None:
                self.idle_timer.cancel()
                self.idle_timer = None
            self.ws.end()

    def _idle_check(self, idle: float) -> None:
        """The idle timeout's watchdog: close the connection when it received no frame for
        ``idle`` seconds and has nothing in flight (no request or answer) and none of its
        subscriptions delivered events since the previous look (``subscriptions_moved``),
        else look again when it could be idle (``idle_check_at``). Pings and pongs are
        not frames: a client that only answers pings is idle.

        One timer per connection, moved only when it fires, instead of a timeout around
        every ``recv``: ``asyncio.timeout`` cost 13-30 us a frame here (a timer handle made
        and cancelled), on the request path (the reader arms it for the next frame before
        the request's task starts)."""
        loop = asyncio.get_running_loop()
        now = loop.time()
        moved = False
        if now >= self.last_frame_at + idle:
            # Marks are taken only at looks that could close: two such looks are at least
            # ``idle`` apart, so "since the previous look" spans a whole timeout.
            marks = self.subscriptions.delivered()
            moved = subscriptions_moved(self.idle_marks, marks)
            self.idle_marks = marks
        busy = bool(moved or self.tasks or self.outgoing)
        at = idle_check_at(now, self.last_frame_at, idle, busy)
        if at is not None:
            self.idle_timer = loop.call_at(at, self._idle_check, idle)
            return
        self.idle_timer = None
        log.info("closing a connection idle for %ss", idle)
        # The reader's ``recv`` then ends with ``ConnectionClosed``.
        task = asyncio.create_task(self.ws.close(1000, "idle timeout"))
        self.flushers.add(task)
        task.add_done_callback(self.flushers.discard)

    # -- subscriptions (``ConnectionSubscriptions``) -----------------------------------------
    async def subscribe(
        self,
        ctx: CallContext,
        actor: AgentActor,
        session_id: str,
        after_seq: int | None = None,
        stream_cursor: int | None = None,
    ) -> int:
        """``events.subscribe``: see ``ConnectionSubscriptions.subscribe``."""
        return await self.subscriptions.subscribe(ctx, actor, session_id, after_seq, stream_cursor)

    def unsubscribe(self, session_id: str) -> bool:
        """Stop notifications for ``session_id``; ``False`` when there was no subscription."""
        return self.subscriptions.unsubscribe(session_id)

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
            self.subscriptions.drop_all()
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
        elif self.owner_moved:
            code, reason = CLOSE_TRY_AGAIN, "this node no longer serves this agent; reconnect"
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
