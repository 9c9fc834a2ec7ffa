"""``InflightWindow``: the slots of one connection's in-flight window (I/O shell).

A frame takes a slot before it is read and gives it back once its answer was written
(``connection_pump.Connection``). One task takes slots (the connection's reader), many
callbacks give them back, all on the event loop; so this is a counter and at most one
waiter, where ``asyncio.Semaphore`` made every frame's ``acquire`` a coroutine and its
``locked`` check a generator over the waiters (the sequential ``turn.persist`` path).
"""

from __future__ import annotations

import asyncio

__all__ = ["InflightWindow"]


class InflightWindow:
    """``size`` slots: ``take`` one now, or ``wait`` for one; ``release`` gives one back
    (handed to the waiting reader, if any)."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("size: must be at least 1")
        self.free = size
        self._waiter: asyncio.Future[None] | None = None

    def locked(self) -> bool:
        """True when no slot is free."""
        return self.free == 0

    def take(self) -> bool:
        """Take a free slot now; false when none is free (then ``wait``)."""
        if self.free:
            self.free -= 1
            return True
        return False

    async def wait(self) -> None:
        """Wait until a slot is released, and take it (one waiter at a time: the reader)."""
        if self._waiter is not None:
            raise RuntimeError("InflightWindow.wait: another task is waiting already")
        if self.take():
            return
        waiter = self._waiter = asyncio.get_running_loop().create_future()
        try:
            await waiter  # ``release`` hands its slot over: ``free`` is unchanged
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.free += 1  # handed over, then cancelled before it was taken
            raise
        finally:
            self._waiter = None

    def release(self) -> None:
        """Give a slot back: to the waiting reader, else to the free count."""
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        else:
            self.free += 1
