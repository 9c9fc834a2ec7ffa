"""Request intake: a bound on bytes received and not yet handed to a handler (I/O shell).

``websockets`` buffers a whole message before ``recv`` returns it (the frame reader's
buffer, then a copy per step: the frame, the unmasked payload), so the server-wide
request budget (``flow.ByteBudget``), which applies once a message is read, cannot
bound the bytes clients are still sending: twelve clients sending a 15 MiB frame each at
once made the server hold twelve frames, several copies each (+574 MiB).

``IntakeConnection`` meters, per connection, the bytes received and not yet claimed by
the reader (``held``: the partial frame in the websockets reader plus the data frames it
queued), and applies one rule (what this needs of ``websockets``' internals goes through
``ws_compat``, the one module that reaches past its public API):

- up to ``threshold`` bytes a connection needs nothing;
- above it, it needs a large-frame permit from the server-wide ``flow.Permits`` pool,
  asked for only while the connection's reader is waiting for a message (a reader blocked
  by its own unwritten answers would keep a permit it cannot use); when none is free, the
  transport stops being read until one is granted (first come, first served);
- a permit holder is never paused by the pool (only beyond ``max_frame + threshold``,
  which it cannot reach while its reader takes its messages), so its frame completes;
  the permit goes with the message to its handler and returns to the pool once the
  request has been handled and its bytes dropped.

Holders always complete and release, waiters are served in order: no deadlock, whatever
the number of connections mid-frame. Bytes held by the intake are at most
``permits x (max_frame + threshold) + connections x (threshold + one socket read)``
(``HeldBytes.total``, ``peak``). ``websockets``' own flow control (the frame
queue's high and low water marks) shares the transport: reading is paused while either
asks for it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar

from websockets.asyncio.server import ServerConnection
from websockets.frames import DATA_OPCODES, Frame, Opcode
from websockets.protocol import Event

from ..concurrency.flow import Permits, WouldBlock
from .ws_compat import (
    install_handover_reader,
    pending_bytes,
    route_queue_flow,
    write_text_now,
)

__all__ = ["HeldBytes", "IntakeConnection", "intake_connection"]

log = logging.getLogger("session_server.server.intake")


class HeldBytes:
    """The bytes the intake holds, server-wide (``total``), and the most it held at once
    (``peak``): figures for tests and /metrics."""

    __slots__ = ("peak", "total")

    def __init__(self) -> None:
        self.total = 0
        self.peak = 0

    def add(self, delta: int) -> None:
        self.total += delta
        if self.total > self.peak:
            self.peak = self.total


class IntakeConnection(ServerConnection):
    """A ``ServerConnection`` whose reading obeys the intake rule (module doc).

    The reader calls ``ready(True)`` before it waits for a message, ``recv(decode=False)``,
    then ``claim(len(message))`` (which tells whether the message carries a permit; then
    it must call ``pool.release()`` when done), then ``ready(False)``; and ``end()`` when
    it reads no more. ``texts`` says, per message in arrival order, whether it was sent
    as a text frame (the reader pops it with ``claim``).
    """

    pool: ClassVar[Permits]
    held: ClassVar[HeldBytes]
    threshold: ClassVar[int]
    holder_limit: ClassVar[int]
    hold_timeout: ClassVar[float | None]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        install_handover_reader(self)
        self.queued = 0  # payload bytes of data frames parsed, not yet claimed
        self.counted = 0  # this connection's share of held.total
        self.permit = False
        self.waiting = False
        self.receiving = False
        self.ended = False
        self.texts: list[bool] = []
        self._queue_paused = False  # websockets' frame queue asks for a pause
        self._intake_paused = False  # the intake rule asks for a pause
        self._grant: asyncio.Future[None] | None = None
        self._stall: asyncio.TimerHandle | None = None

    # -- websockets hooks -------------------------------------------------------------------
    def write_now(self, data: bytes) -> bool:
        """Write ``data`` as one text frame now, without a task, when ``send`` would not
        wait: the connection is open, no fragmented message is being sent and writing is
        not paused. False: nothing was written (use ``send``).

        An answer written this way skips a task and a turn of the event loop (the
        sequential ``turn.persist``); ``ws_compat.write_text_now``."""
        return write_text_now(self, data)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        # websockets pauses and resumes the transport itself for its frame queue; route
        # that through ``_apply`` so neither undoes the other's pause.
        route_queue_flow(self, lambda: self._pause_queue(True), lambda: self._pause_queue(False))

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._check()

    def process_event(self, event: Event) -> None:
        if isinstance(event, Frame) and event.opcode in DATA_OPCODES:
            self.queued += len(event.data)
            if event.opcode is not Opcode.CONT:
                self.texts.append(event.opcode is Opcode.TEXT)
        super().process_event(event)

    # -- the reader's side --------------------------------------------------------------------
    def ready(self, receiving: bool) -> None:
        """The reader waits for a message (True) or is busy or blocked elsewhere (False)."""
        self.receiving = receiving
        self._check()

    def claim_small(self, size: int) -> bool | None:
        """``claim`` of a message of at most ``threshold`` bytes, which never waits (it
        needs no permit): whether it came as text. ``None`` for a larger one, which is
        not claimed (use ``claim``). The common case, without a coroutine."""
        if size > self.threshold:
            return None
        text = self.texts.pop(0) if self.texts else True
        self.queued -= size
        self._check()
        return text

    async def claim(self, size: int) -> tuple[bool, bool]:
        """The reader took a message of ``size`` bytes: it leaves this connection's count.
        Returns (whether it came as text, whether it carries a permit). A message over the
        threshold always carries one: the connection's, or one waited for here (the
        message completed in the read that crossed the threshold)."""
        small = self.claim_small(size)
        if small is not None:
            return small, False
        text = self.texts.pop(0) if self.texts else True
        if not self.permit:
            if not self.waiting and self._take_permit():
                self.permit = True
            else:
                self._queue_for_permit()
                grant = self._grant = asyncio.get_running_loop().create_future()
                try:
                    await grant
                finally:
                    self._grant = None
                    if not self.permit:  # cancelled while waiting
                        self._withdraw()
        self.queued -= size
        self.permit = False  # it goes with the message
        self._check()
        return text, True

    def end(self) -> None:
        """The reader stopped: drop this connection out of the pool's figures and let
        websockets' own flow control alone decide (the close handshake must be read)."""
        if self.ended:
            return
        self.ended = True
        self._withdraw()
        self._disarm()
        if self.permit:
            self.permit = False
            self.pool.release()
        self.held.add(-self.counted)
        self.counted = 0
        self._set_intake_paused(False)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self._grant is None:  # a claim waiting for a permit keeps its place
            self._withdraw()

    # -- the rule ---------------------------------------------------------------------------
    def _check(self) -> None:
        if self.ended:
            return
        held = pending_bytes(self) + self.queued  # bytes not claimed yet
        if held <= self.threshold and not (
            self.waiting or self.permit or self._intake_paused or self._stall is not None
        ):
            # The common case (runs 4 times per message): small, and nothing to withdraw,
            # release, resume or disarm; what the full rule below would do, and no more.
            if held != self.counted:
                self.held.add(held - self.counted)
                self.counted = held
            return
        self.held.add(held - self.counted)
        self.counted = held
        if held <= self.threshold:
            self._withdraw()
            if self.permit:  # what needed it was small messages, claimed since
                self.permit = False
                self.pool.release()
            pause = False
        elif self.permit:
            pause = held > self.holder_limit
        else:
            if self.receiving and not self.waiting:
                if self._take_permit():
                    self.permit = True
                else:
                    self._queue_for_permit()
            elif not self.receiving and self._grant is None:
                self._withdraw()
            pause = not self.permit
        self._set_intake_paused(pause)
        self._watch_stall()

    def _watch_stall(self) -> None:
        # A permit held while the reader does not take messages (the client's own unread
        # answers fill its window) serves nobody; a few such clients would keep every
        # permit. After ``hold_timeout`` the connection is dropped and the permit freed.
        stalled = self.permit and not self.receiving
        if not stalled:
            self._disarm()
        elif self._stall is None and self.hold_timeout is not None:
            self._stall = self.loop.call_later(self.hold_timeout, self._stalled)

    def _disarm(self) -> None:
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None

    def _stalled(self) -> None:
        self._stall = None
        log.warning(
            "dropping a connection that held a large-frame permit for %s s without its "
            "reader taking a message (it does not read its answers)",
            self.hold_timeout,
        )
        self.transport.abort()

    def _take_permit(self) -> bool:
        """Take a permit now if one is free and nobody waits for one."""
        try:
            self.pool.acquire_nowait()
        except WouldBlock:
            return False
        return True

    def _queue_for_permit(self) -> None:
        if not self.waiting:
            self.waiting = True
            self.pool.acquire_later(self, self._granted)

    def _withdraw(self) -> None:
        if self.waiting:
            self.waiting = False
            self.pool.cancel_acquire(self)

    def _granted(self) -> None:
        self.waiting = False
        if self.ended:
            self.pool.release()
            return
        self.permit = True
        if self._grant is not None and not self._grant.done():
            self._grant.set_result(None)
        self._check()

    def _pause_queue(self, paused: bool) -> None:
        self._queue_paused = paused
        self._apply()

    def _set_intake_paused(self, paused: bool) -> None:
        if paused != self._intake_paused:
            self._intake_paused = paused
            self._apply()

    def _apply(self) -> None:
        transport = getattr(self, "transport", None)
        if transport is None:
            return
        if self._queue_paused or self._intake_paused:
            transport.pause_reading()
        else:
            transport.resume_reading()


def intake_connection(
    pool: Permits,
    held: HeldBytes,
    *,
    threshold: int,
    max_frame: int,
    hold_timeout: float | None = None,
) -> type[IntakeConnection]:
    """An ``IntakeConnection`` class bound to ``pool`` and counting into ``held`` (pass it
    to ``serve`` as ``create_connection``)."""

    class BoundIntakeConnection(IntakeConnection):
        pass

    BoundIntakeConnection.pool = pool
    BoundIntakeConnection.held = held
    BoundIntakeConnection.threshold = threshold
    BoundIntakeConnection.holder_limit = max_frame + threshold
    BoundIntakeConnection.hold_timeout = hold_timeout
    return BoundIntakeConnection
