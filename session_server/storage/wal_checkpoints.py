"""WAL checkpoints off the commit path (I/O shell).

SQLite's automatic checkpoint runs inside the commit that crosses its threshold (1000 WAL
pages by default), and that commit's caller waits for all of it: at ``synchronous=NORMAL``
the flush of every WAL frame written since the last checkpoint (NORMAL defers it to the
checkpoint), the copy of the pages into the database and the database's flush. On this
project's reference VM that was 5 ms every ~90 turns, about 50 us per turn on average and
the whole p99 of a sequential NORMAL turn; at FULL about 1.2 ms every ~90 turns.

``BackgroundCheckpoints`` moves the bulk of that work beside the writes. Every
``CHECKPOINT_EVERY_WRITES`` committed appends it runs one ``PASSIVE`` checkpoint on a
connection of its own (opened for it and closed after), on a worker thread, while the writer
goes on committing: WAL lets one checkpoint run beside one writer, and a passive checkpoint
never waits for a reader or the writer.

SQLite starts the WAL over from its beginning only when a write begins with every frame
copied and no checkpoint running. When writes come back to back a background checkpoint
never quite catches up. So once the WAL is estimated at ``RESTART_AT_PAGES`` or more when
one ends (its length when it began, plus ``PAGES_PER_APPEND`` for each append committed
while it ran), no new one starts and the next write first runs a passive checkpoint itself,
on the writer's connection: only the frames written since the background one began are left
to copy, and that write then starts the WAL over. A background checkpoint that has let
``MAX_OVERLAP_APPENDS`` appends commit while it runs (a slow disk) makes the next write wait
for it and then catch up the same way. The WAL of a busy agent thus stays under about
``RESTART_AT_PAGES`` plus the pages of ``2 * MAX_OVERLAP_APPENDS + CHECKPOINT_EVERY_WRITES``
appends (under 3000 pages, 12 MiB, for 4-event turns; near 1000 pages, 4 MiB, while the
disk keeps up); after an idle gap the next write starts it over anyway. SQLite's own automatic checkpoint stays on the writer at
``BACKSTOP_PAGES`` (it is skipped while a background checkpoint runs). As always with WAL, a
reader holding an old snapshot keeps every frame after it: while such a read lasts (a
mirror repair reads a session in pages from one snapshot) the WAL grows, whatever the
checkpoints.

A checkpoint's connection closes after it, but SQLite keeps that database descriptor open
while the agent's other connections hold locks and reuses it for the next one: an agent
holds one more descriptor once it has checkpointed, two while a checkpoint runs
(``limits.FDS_PER_AGENT`` counts them).

A failed checkpoint (background or catch-up) is logged and changes nothing else: the write
goes on. Durability is SQLite's: a checkpoint never drops a committed frame, and a process
killed during one leaves a WAL that SQLite completes on the next open.
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
    "MAX_OVERLAP_APPENDS",
    "PAGES_PER_APPEND",
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
# Appends a write lets commit while a background checkpoint runs before it waits for it.
MAX_OVERLAP_APPENDS: Final = 64
# WAL pages an append is taken to add, to estimate the WAL's length when a checkpoint
# ends (a 4-event turn dirties about 12); only when to catch up depends on it.
PAGES_PER_APPEND: Final = 8
# The writer's own automatic checkpoint (``PRAGMA wal_autocheckpoint``), in pages: the
# last resort when background checkpoints fail.
BACKSTOP_PAGES: Final = 4000

RunOnThread = Callable[[Callable[[], Any]], Awaitable[Any]]


class BackgroundCheckpoints:
    """Passive checkpoints of one agent file, every ``every`` appends, off the commit path.

    ``run_on_thread(fn)`` runs ``fn()`` on a worker thread (the store's pool). Call
    ``committed(n)`` after each write transaction that committed (``n`` appends in it) and,
    before each write, ``await before_write()`` when ``attention`` is set (``True``: run
    the write with ``catch_up_then``);
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
        self._overlap = 0  # appends committed while the running checkpoint runs
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
        if self.running:
            self._overlap += writes
            return  # one at a time; the count keeps growing until it ends
        if self._writes < self.every or self._closed or self._catch_up:
            return
        self._writes = 0
        self._overlap = 0
        self._task = asyncio.get_running_loop().create_task(self._checkpoint())

    @property
    def catch_up_due(self) -> bool:
        return self._catch_up

    @property
    def running(self) -> bool:
        """Whether a background checkpoint is in flight."""
        return self._task is not None and not self._task.done()

    @property
    def attention(self) -> bool:
        """Whether ``before_write`` has something to do (else the write just runs)."""
        return self._catch_up or (self._overlap >= MAX_OVERLAP_APPENDS and self.running)

    async def before_write(self) -> bool:
        """Whether the write about to run should catch up first (once per request). A
        checkpoint that has overlapped ``MAX_OVERLAP_APPENDS`` appends is waited for
        first. No background checkpoint is running when this answers ``True``."""
        if self._overlap >= MAX_OVERLAP_APPENDS and self.running:
            await self.settle()
            self._catch_up = not self._closed
        if not self._catch_up:
            return False
        self._catch_up = False
        self._writes = 0
        self.catch_ups += 1
        return True

    async def settle(self) -> None:
        """Wait for the checkpoint in flight, if any (its failure was logged already)."""
        task = self._task
        if task is not None and not task.done():
            # ``wait``, not ``shield``: a task cancelled at shutdown raises nothing here.
            await asyncio.wait({task})

    async def close(self) -> None:
        self._closed = True
        await self.settle()

    async def _checkpoint(self) -> None:
        try:
            wal_pages = await self._run(self._checkpoint_now)
        except Exception as exc:  # harmless: the writer's backstop still bounds the WAL
            log.warning("background checkpoint of %s failed: %s", self.path, exc)
            return
        estimate = wal_pages + PAGES_PER_APPEND * self._overlap
        if estimate >= self.restart_at and not self._closed:
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
