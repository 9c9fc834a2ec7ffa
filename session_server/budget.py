"""``ByteBudget``: a bound on bytes in use, shared by many tasks (I/O shell).

The server keeps two kinds of budget with it:

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
  (``take``: no waiting, they only make later reservations wait).
"""

from __future__ import annotations

import asyncio
from collections import deque

__all__ = ["ByteBudget"]


class ByteBudget:
    """Counts bytes in use against ``capacity``; ``acquire`` waits until a request fits.

    Waiters are served in arrival order within their class (small, large); a small
    request does not queue behind a large one that waits for the large share.
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
        """Whether ``size`` bytes would fit now (``try_acquire`` would take them)."""
        cost, large = self._cost(size)
        return self._fits(cost, large)

    def take(self, size: int) -> int:
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

    def try_acquire(self, size: int) -> int | None:
        """``acquire`` without waiting: the token when ``size`` bytes fit now (and no
        request of its class waits), else ``None`` (then ``acquire`` queues it). The
        reader takes every frame's bytes: the common case costs no coroutine."""
        cost, large = self._cost(size)
        if self._waiters and any(w[1] == large for w in self._waiters):
            return None  # keep order within a class
        if not self._fits(cost, large):
            return None
        self._take(cost, large)
        return -cost if large else cost

    async def acquire(self, size: int) -> int:
        """Wait until ``size`` bytes fit; return the token to hand to ``release``."""
        token = self.try_acquire(size)
        if token is not None:
            return token
        cost, large = self._cost(size)
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

    @property
    def waiting(self) -> int:
        """Requests queued for room."""
        return len(self._waiters)

    def release(self, token: int) -> None:
        """Give back what ``acquire`` returned (negative means a large frame)."""
        cost = abs(token)
        self.in_use -= cost
        if token < 0:
            self.large_in_use -= cost
        self._wake()

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
