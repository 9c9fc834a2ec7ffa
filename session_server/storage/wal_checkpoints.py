"""WAL checkpoints off the commit path (I/O shell).

SQLite's automatic checkpoint runs inside the commit that crosses its threshold (1000 WAL
pages by default), and that commit's caller waits for all of it: at ``synchronous=NORMAL``
the flush of every WAL frame written since the last checkpoint (NORMAL defers it to the
checkpoint), the copy of the pages into the database and the database's flush. On this
project's reference VM that was 5 ms every ~90 turns, about 50 us per turn on average and
the whole p99 of a sequential NORMAL turn; at FULL about 1.2 ms every ~90 turns.

``BackgroundCheckpoints`` moves that work beside the writes: every
``CHECKPOINT_EVERY_WRITES`` committed writes it runs one ``PASSIVE`` checkpoint on a
connection of its own, on a worker thread, while the writer goes on committing (WAL lets
one checkpoint run beside one writer). A passive checkpoint never waits for a reader or the
writer: it copies what it can. The connection is opened for the checkpoint and closed
after it (a few hundred microseconds every 16 writes, off the commit path), so an open agent
holds no more file descriptors than before (``limits.FDS_PER_AGENT``).

SQLite starts the WAL over from its beginning only when a write begins with every frame
copied. When writes come back to back, background checkpoints never quite catch up, so the
writer keeps SQLite's automatic checkpoint as a backstop at ``BACKSTOP_PAGES``: it then has
only the frames of the last few writes left to copy, and the WAL restarts. (SQLite skips it
while a background checkpoint runs; the next commit runs it.) The WAL of a busy agent is
thus at most about ``BACKSTOP_PAGES`` pages (8 MiB of 4 KiB pages) plus the writes of one
background checkpoint's time; an idle gap of a few milliseconds lets a background
checkpoint finish and the WAL restart sooner.

A failed background checkpoint is logged and changes nothing: the backstop still holds the
WAL to its bound. Durability is SQLite's: a checkpoint never drops a committed frame, and a
process killed during one leaves a WAL that SQLite completes on the next open.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

__all__ = ["BACKSTOP_PAGES", "CHECKPOINT_EVERY_WRITES", "BackgroundCheckpoints"]

log = logging.getLogger(__name__)

# About 200 WAL pages for the 4-event turns of the benchmarks: one checkpoint's flushes
# are shared by that many writes.
CHECKPOINT_EVERY_WRITES: Final = 16
# The writer's own automatic checkpoint (``PRAGMA wal_autocheckpoint``), in pages.
BACKSTOP_PAGES: Final = 2000

RunOnThread = Callable[[Callable[[], Any]], Awaitable[Any]]


class BackgroundCheckpoints:
    """Passive checkpoints of one agent file, every ``every`` writes, off the commit path.

    ``run_on_thread(fn)`` runs ``fn()`` on a worker thread (the store's pool). Call
    ``committed(n)`` after each write transaction that committed (``n`` appends in it);
    ``settle()`` waits for a checkpoint in flight (before a truncating checkpoint of the
    writer's own); ``close()`` stops new ones and settles (before the writer closes, so the
    writer's close still removes the WAL as the last connection).
    """

    def __init__(
        self,
        path: Path,
        synchronous: str,
        run_on_thread: RunOnThread,
        every: int = CHECKPOINT_EVERY_WRITES,
    ) -> None:
        self.path = path
        self.synchronous = synchronous
        self.every = every
        self._run = run_on_thread
        self._writes = 0
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.runs = 0  # checkpoints completed (tests and diagnostics)

    def committed(self, writes: int = 1) -> None:
        """Count committed writes; start a checkpoint when ``every`` have gone by since the
        last one started and none is running."""
        self._writes += writes
        if self._writes < self.every or self._closed:
            return
        if self._task is not None and not self._task.done():
            return  # one at a time; the count keeps growing until it ends
        self._writes = 0
        self._task = asyncio.get_running_loop().create_task(self._checkpoint())

    async def settle(self) -> None:
        """Wait for the checkpoint in flight, if any (its failure was logged already)."""
        task = self._task
        if task is not None:
            await asyncio.shield(task)

    async def close(self) -> None:
        self._closed = True
        await self.settle()

    async def _checkpoint(self) -> None:
        try:
            await self._run(self._checkpoint_now)
        except Exception as exc:  # harmless: the writer's backstop still bounds the WAL
            log.warning("background checkpoint of %s failed: %s", self.path, exc)

    def _checkpoint_now(self) -> None:
        """One passive checkpoint (on a worker thread)."""
        if self._closed:
            return
        # ``mode=rw``: never creates the file (it could be replaced or gone by now).
        target = f"{self.path.resolve().as_uri()}?mode=rw"
        conn = sqlite3.connect(target, isolation_level=None, uri=True)
        try:
            # The checkpoint's flushes follow the store's level (NORMAL and FULL both flush
            # the WAL before copying and the database after).
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        finally:
            conn.close()
        self.runs += 1
