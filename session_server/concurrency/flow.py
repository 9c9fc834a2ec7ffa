"""Flow control: the bounds the server keeps on what clients make it hold (I/O shell).

One vocabulary for every bound, trio's and anyio's: ``acquire_nowait`` takes now or
raises ``WouldBlock``, ``acquire`` waits until it can take (cancellable: a cancelled
waiter leaks nothing, whether or not it had been granted already), ``release`` gives
back. Byte-weighted bounds take the amount, and give a token for ``release``.

- ``Permits``: ``count`` permits, granted in arrival order. A connection's in-flight
  window (``connection_pump``: a frame takes a slot before it is read and gives it back
  once its answer was written) and the server-wide large-frame permits (``intake``: a
  message over the intake threshold is received and handled under one). The intake asks
  for a permit from a protocol callback, not a task: ``acquire_later`` queues a callback
  in the same line as the tasks that ``acquire``.
- ``ByteBudget``: bytes in use against a capacity, shared by many tasks:

  - request bytes being handled, server-wide: every frame takes its size from the budget
    before it is parsed and gives it back when its handling ends, so the memory spent
    parsing, validating and storing requests is bounded whatever the number of
    connections. A frame bigger than ``large_share`` of the capacity is "large": large
    frames together may hold at most that share, so small requests (the common case)
    always find room and are not queued behind a few huge appends;
  - unread answer bytes, server-wide and per connection (``connection_pump``): a request
    that may answer up to ``max_answer_bytes`` reserves that much before it runs
    (``acquire``), keeps only what its encoded answer holds once it is encoded
    (``shrink``), and gives that back once the socket took it (``release``). Answers and
    notifications whose size is bounded otherwise are counted as they are queued
    (``acquire_forced``: no waiting, they only make later reservations wait).

The reader of a connection takes every frame's slot and bytes with ``acquire_nowait``
first, and awaits ``acquire`` only when that raises: the common case costs no coroutine.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

__all__ = ["ByteBudget", "Permits", "WouldBlock"]


class WouldBlock(Exception):
    """``acquire_nowait`` cannot take now (``acquire`` would wait): trio's and anyio's
    name. A signal between the server's own parts, never an error a client sees."""


class Permits:
    """``count`` permits: ``acquire_nowait`` / ``acquire`` one, ``release`` it.

    Waiters (tasks in ``acquire``, callbacks queued by ``acquire_later``) are granted in
    arrival order, and nobody takes a permit past a waiter. ``in_use``, ``peak``,
    ``waiting`` and ``waits`` (how many times a request queued) are figures for tests and
    /metrics.
    """

    def __init__(self, count: int) -> None:
        if count < 1:
            raise ValueError("count: must be at least 1")
        self.count = count
        self.in_use = 0
        self.peak = 0
        self.waits = 0
        self._waiters: dict[object, Callable[[], None]] = {}  # insertion order: FIFO

    def acquire_nowait(self) -> None:
        """Take a permit now; ``WouldBlock`` when none is free or somebody waits."""
        if self._waiters or self.in_use >= self.count:
            raise WouldBlock
        self.in_use += 1
        if self.in_use > self.peak:
            self.peak = self.in_use

    async def acquire(self) -> None:
        """Take a permit, waiting for one in arrival order."""
        if not self._waiters and self.in_use < self.count:
            self.in_use += 1
            if self.in_use > self.peak:
                self.peak = self.in_use
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def granted() -> None:
            if future.done():  # cancelled while queued: the permit goes on
                self.in_use -= 1
            else:
                future.set_result(None)

        self.acquire_later(future, granted)
        try:
            await future
        except BaseException:
            if future.done() and not future.cancelled():
                self.release()  # granted, then cancelled before it ran
            else:
                self.cancel_acquire(future)
            raise

    def acquire_later(self, key: object, granted: Callable[[], None]) -> None:
        """Queue ``key`` for a permit; ``granted()`` runs once one was taken for it (from
        ``release``). For a caller that is not a task (a protocol callback)."""
        self._waiters[key] = granted
        self.waits += 1

    def cancel_acquire(self, key: object) -> None:
        """Take ``key`` out of the queue (nothing when it is not queued)."""
        self._waiters.pop(key, None)

    def release(self) -> None:
        """Give a permit back; the first waiters get the free permits."""
        self.in_use -= 1
        while self._waiters and self.in_use < self.count:
            key = next(iter(self._waiters))
            granted = self._waiters.pop(key)
            self.in_use += 1
            if self.in_use > self.peak:
                self.peak = self.in_use
            granted()

    @property
    def waiting(self) -> int:
        """Requests queued for a permit."""
        return len(self._waiters)


class ByteBudget:
    """Counts bytes in use against ``capacity``; ``acquire`` waits until a request fits.

    Waiters are served in arrival order within their class (small, large); a small
    request does not queue behind a large one that waits for the large share. A token
    (what ``acquire*`` returns, for ``release`` and ``shrink``) is the bytes counted,
    negative for a large request.
    """

    def __init__(self, capacity: int, *, large_share: float = 0.5) -> None:
        if capacity < 1:
            raise ValueError("capacity: must be at least 1")
        self.capacity = capacity
        self.large_limit = max(1, int(capacity * large_share))
        self.large_threshold = max(1, capacity // 16)
        self.in_use = 0
        self.large_in_use = 0
        self.peak = 0  # the most bytes in use at once
        self._waiters: deque[tuple[int, bool, asyncio.Future[None]]] = deque()

    def _cost(self, size: int) -> tuple[int, bool]:
        """What a frame of ``size`` bytes takes of the budget, and whether it is large."""
        large = size >= self.large_threshold
        return max(1, min(size, self.large_limit if large else self.capacity)), large

    def _fits(self, cost: int, large: bool) -> bool:
        if self.in_use + cost > self.capacity:
            return False
        return not large or self.large_in_use + cost <= self.large_limit

    def _take(self, cost: int, large: bool) -> None:
        self.in_use += cost
        if large:
            self.large_in_use += cost
        if self.in_use > self.peak:
            self.peak = self.in_use

    def fits(self, size: int) -> bool:
        """Whether ``size`` bytes would fit now (``acquire_nowait`` would take them)."""
        cost, large = self._cost(size)
        return self._fits(cost, large)

    def acquire_nowait(self, size: int) -> int:
        """Take ``size`` bytes now; the token for ``release``. ``WouldBlock`` when they do
        not fit now, or a request of their class waits (then ``acquire`` queues it)."""
        cost, large = self._cost(size)
        if self._waiters and any(w[1] == large for w in self._waiters):
            raise WouldBlock  # keep order within a class
        if not self._fits(cost, large):
            raise WouldBlock
        self._take(cost, large)
        return -cost if large else cost

    async def acquire(self, size: int) -> int:
        """Wait until ``size`` bytes fit; return the token to hand to ``release``."""
        cost, large = self._cost(size)
        if not any(w[1] == large for w in self._waiters) and self._fits(cost, large):
            self._take(cost, large)
            return -cost if large else cost
        # Queued behind its class, or it does not fit yet.
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (cost, large, future)
        self._waiters.append(entry)
        try:
            await future
        except BaseException:
            if future.done() and not future.cancelled():
                self.release(-cost if large else cost)  # granted, then cancelled
            else:
                self._waiters.remove(entry)
            raise
        return -cost if large else cost

    def acquire_forced(self, size: int) -> int:
        """Count ``size`` bytes now, whether or not they fit (what is already in memory and
        must be sent); return the token for ``release``. Waiters wait the longer."""
        cost, large = self._cost(size)
        self._take(cost, large)
        return -cost if large else cost

    def shrink(self, token: int, size: int) -> int:
        """Keep only ``size`` bytes of what ``token`` holds (never more than it holds);
        the rest goes back to the waiters. Returns the token for what is kept."""
        kept, large = self._cost(size)
        held = abs(token)
        if kept >= held:
            return token
        self.in_use -= held
        if token < 0:
            self.large_in_use -= held
        self._take(kept, large)
        self._wake()
        return -kept if large else kept

    def release(self, token: int) -> None:
        """Give back what ``acquire*`` or ``shrink`` returned."""
        cost = abs(token)
        self.in_use -= cost
        if token < 0:
            self.large_in_use -= cost
        self._wake()

    @property
    def waiting(self) -> int:
        """Requests queued for room."""
        return len(self._waiters)

    def _wake(self) -> None:
        """Serve the waiters that fit now, in order within their class."""
        if not self._waiters:
            return
        blocked: set[bool] = set()  # classes whose first waiter does not fit yet
        for entry in list(self._waiters):
            w_cost, w_large, future = entry
            if w_large in blocked or future.done():
                continue
            if self._fits(w_cost, w_large):
                self._waiters.remove(entry)
                self._take(w_cost, w_large)
                future.set_result(None)
            else:
                blocked.add(w_large)
