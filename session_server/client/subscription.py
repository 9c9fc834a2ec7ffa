"""``Subscription``: one session's ``events.appended`` notifications as an async iterator."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Final, Protocol

import msgspec

from ..values.events import SessionEvent

__all__ = ["Subscription", "SubscriptionOwner"]

_END: Final = object()


class SubscriptionOwner(Protocol):
    """What a subscription needs of its client (``SessionClient``): reading the events a
    gap left out, and ending the notifications."""

    async def load_events(
        self,
        session_id: str,
        *,
        limit: int | None = ...,
        tail: bool = ...,
        after_seq: int | None = ...,
    ) -> list[SessionEvent]: ...

    async def unsubscribe(self, sub: Subscription) -> None: ...


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
    When the client's connection is replaced (a server restart), the subscription goes on
    over the new one from ``cursor``, the last seq it received: no gap, no duplicate; if
    the server cannot be reached within the client's budget, iteration raises
    ``ServerUnavailable``.
    """

    def __init__(self, client: SubscriptionOwner, session_id: str) -> None:
        self.client = client
        self.session_id = session_id
        self.last_seq = 0
        self.deleted = False
        # ``(to_seq, rewind_seq)`` of each ``session.rewound`` received, in order.
        self.rewinds: list[tuple[int, int]] = []
        # The last seq received (or reported missing by a gap): a resumed subscription
        # asks for the events after it, and drops any it already has.
        self.cursor = 0
        self.active = False  # answered: from now on a reconnect resumes it
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._pending: list[SessionEvent] = []
        self._closed = False

    def started(self, cursor: int) -> None:
        """The server answered the subscription; events after ``cursor`` come next."""
        self.cursor = max(self.cursor, cursor)
        self.active = True

    def deliver(self, events: list[SessionEvent]) -> None:
        """Queue the events of one notification (called by the client's reader); those at
        or below ``cursor`` were received already (a resumed subscription's replay)."""
        fresh = [e for e in events if e.seq > self.cursor]
        if fresh:
            self.cursor = max(e.seq for e in fresh)
            self._queue.put_nowait(fresh)

    def rewound(self, to_seq: int, rewind_seq: int) -> None:
        """The session was rewound to ``to_seq`` (called by the client's reader): its
        events after ``to_seq`` left its history; the next events follow ``rewind_seq``."""
        self.rewinds.append((to_seq, rewind_seq))
        self.cursor = max(self.cursor, rewind_seq)

    def gap(self, from_seq: int, to_seq: int) -> None:
        """Queue a gap the server reported (called by the client's reader)."""
        self._queue.put_nowait(_Gap(from_seq, to_seq))
        self.cursor = max(self.cursor, to_seq)

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
