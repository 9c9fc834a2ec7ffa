"""WAL checkpoints off the commit path (I/O shell).

SQLite's automatic checkpoint runs inside the commit that crosses its threshold (1000 WAL
pages by default), and that commit's caller waits for all of it: at ``synchronous=NORMAL``
the flush of every WAL frame written since the last checkpoint (NORMAL defers it to the
checkpoint), the copy of the pages into the database and the database's flush. On this
project's reference VM that was 5 ms every ~90 turns, about 50 us per turn on average and
the whole p99 of a sequential NORMAL turn; at FULL about 1.2 ms every ~90 turns.

``BackgroundCheckpoints`` moves the bulk of that work beside the writes. Every
``CHECKPOINT_EVERY_WRITES`` committed appends it runs one ``PASSIVE`` checkpoint on a
connection of its own (opened for it and closed after, so an open agent holds no more file
descriptors: ``limits.FDS_PER_AGENT``), on a worker thread, while the writer goes on
committing: WAL lets one checkpoint run beside one writer, and a passive checkpoint never
waits for a reader or the writer.

SQLite starts the WAL over from its beginning only when a write begins with every frame
copied and no checkpoint running. When writes come back to back a background checkpoint
never quite catches up, so once one reports a WAL of ``RESTART_AT_PAGES`` or more, no new
one starts and the next write first runs a passive checkpoint itself, on the writer's
connection: only the frames of the writes since the background one are left to copy, and
that write then starts the WAL over. A busy agent's WAL thus stays near ``RESTART_AT_PAGES``
(4 MiB of 4 KiB pages, SQLite's own default); an idle gap lets a background checkpoint
finish and the next write start the WAL over anyway. The writer keeps SQLite's automatic
checkpoint at ``BACKSTOP_PAGES`` in case background checkpoints keep failing.

A failed checkpoint (background or catch-up) is logged and changes nothing else: the write
goes on and the backstop still bounds the WAL. Durability is SQLite's: a checkpoint never
drops a committed frame, and a process killed during one leaves a WAL that SQLite completes
on the next open.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final, TypeVar

__all__ = [
    "BACKSTOP_PAGES",
    "CHECKPOINT_EVERY_WRITES",
    "RESTART_AT_PAGES",
    "BackgroundCheckpoints",
    "catch_up_then",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

# About 200 WAL pages for the 4-event turns of the benchmarks: one checkpoint's flushes
# are shared by that many appends.
CHECKPOINT_EVERY_WRITES: Final = 16
# A background checkpoint reporting a WAL this long (pages) asks the next write to catch
# up and start the WAL over.
RESTART_AT_PAGES: Final = 1000
# The writer's own automatic checkpoint (``PRAGMA wal_autocheckpoint``), in pages: the
# last resort when background checkpoints fail.
BACKSTOP_PAGES: Final = 4000

RunOnThread = Callable[[Callable[[], Any]], Awaitable[Any]]


class BackgroundCheckpoints:
    """Passive checkpoints of one agent file, every ``every`` appends, off the commit path.

    ``run_on_thread(fn)`` runs ``fn()`` on a worker thread (the store's pool). Call
    ``committed(n)`` after each write transaction that committed (``n`` appends in it) and
    ``take_catch_up()`` before each write (``True``: run it with ``catch_up_then``);
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
        restart_at: int = RESTART_AT_PAGES,
    ) -> None:
        self.path = path
        self.synchronous = synchronous
        self.every = every
        self.restart_at = restart_at
        self._run = run_on_thread
        self._writes = 0
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        # Set by a background checkpoint that found a long WAL; taken by the next write.
        self._catch_up = False
        self.runs = 0  # background checkpoints completed (tests and diagnostics)
        self.catch_ups = 0  # writes that caught up first

    def committed(self, writes: int = 1) -> None:
        """Count committed appends; start a checkpoint when ``every`` have gone by since
        the last one started, none is running and no catch-up is due."""
        self._writes += writes
        if self._writes < self.every or self._closed or self._catch_up:
            return
        if self.running:
            return  # one at a time; the count keeps growing until it ends
        self._writes = 0
        self._task = asyncio.get_running_loop().create_task(self._checkpoint())

    @property
    def catch_up_due(self) -> bool:
        return self._catch_up

    @property
    def running(self) -> bool:
        """Whether a background checkpoint is in flight."""
        return self._task is not None and not self._task.done()

    def take_catch_up(self) -> bool:
        """Whether the write about to run should catch up first (once per request). No
        background checkpoint is running then: none starts while a catch-up is due."""
        if not self._catch_up:
            return False
        self._catch_up = False
        self._writes = 0
        self.catch_ups += 1
        return True

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
            wal_pages = await self._run(self._checkpoint_now)
        except Exception as exc:  # harmless: the writer's backstop still bounds the WAL
            log.warning("background checkpoint of %s failed: %s", self.path, exc)
            return
        if wal_pages >= self.restart_at and not self._closed:
            self._catch_up = True

    def _checkpoint_now(self) -> int:
        """One passive checkpoint (on a worker thread); the WAL's length in pages."""
        if self._closed:
            return 0
        # ``mode=rw``: never creates the file (it could be replaced or gone by now).
        target = f"{self.path.resolve().as_uri()}?mode=rw"
        conn = sqlite3.connect(target, isolation_level=None, uri=True)
        try:
            # The checkpoint's flushes follow the store's level (NORMAL and FULL both flush
            # the WAL before copying and the database after).
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            _busy, wal_pages, _copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        finally:
            conn.close()
        self.runs += 1
        return int(wal_pages)


def catch_up_then(conn: sqlite3.Connection, job: Callable[..., T], *args: Any) -> T:
    """A passive checkpoint on the writer ``conn``, then ``job(*args)`` (the write, which
    then starts the WAL over). A failed checkpoint is logged; the write runs anyway."""
    try:
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    except sqlite3.Error as exc:
        log.warning("catch-up checkpoint failed: %s", exc)
    return job(*args)
