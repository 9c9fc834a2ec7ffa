"""The connections of one agent file (I/O shell): opening, the worker-thread calls, closing.

``StoreConnections`` is the plumbing ``AgentStore`` is built on. One file per agent in WAL
mode with two connections: a writer, used only under the actor's write lock, and a
read-only reader, so reads see the last committed state and never wait for a write in
progress (WAL snapshot isolation). Every operation is one synchronous function run on a
worker thread (``WorkerThreads.run``: the registry's pool, else the process's default one;
``_write``: one whole transaction per call, ``_read``: one read at a time on the reader). Opening takes the agent's exclusive lock
(``agent.lock``), creates and migrates the file; a read-only open checks its schema.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Literal, Self, TypeVar

from ..concurrency.worker_threads import WorkerThreads, default_threads
from ..process.limits import descriptor_error, out_of_descriptors
from ..values.errors import AgentUnavailableError
from .file_lock import try_exclusive_lock
from .file_modes import make_dir
from .idempotency import DEFAULT_RETENTION, IdempotencyRetention
from .recall_levels import fts5_tables, repair_levels
from .recall_pending import erase_queued
from .schema import READABLE_SCHEMA_VERSION, SCHEMA_VERSION
from .sqlite_open import connect, migrate
from .transactions import storage_error, write_txn
from .turn_log import LogEntries, TurnLog, applied_seq, apply_entries, install_random

__all__ = ["LOCK_FILE", "StoreConnections", "Synchronous"]

Synchronous = Literal["FULL", "NORMAL"]
T = TypeVar("T")
log = logging.getLogger(__name__)


class StoreConnections:
    """The writer and reader connections of one agent file, each call on a worker thread.
    Create with ``await <subclass>.open(...)``."""

    def __init__(
        self,
        path: Path,
        agent_id: str,
        synchronous: Synchronous,
        busy_timeout_ms: int,
        executor: WorkerThreads | None,
        on_commit: Callable[[float, int], None] | None = None,
        readonly: bool = False,
        idempotency: IdempotencyRetention = DEFAULT_RETENTION,
        count_executor: WorkerThreads | None = None,
        turn_log: TurnLog | None = None,
    ) -> None:
        self.path = path
        # Cluster mode: every write transaction passes the log's commit point. ``None``
        # (a ``LocalTurnLog`` too): the single-node path, unchanged.
        self.turn_log = turn_log if turn_log is not None and turn_log.records else None
        self.idempotency = idempotency
        self.readonly = readonly
        # True when ``open`` made a new file: no session was ever in it (activation then
        # leaves any folder beside it alone: the server wrote none of them).
        self.created = False
        self.agent_id = agent_id
        self.synchronous = synchronous
        self.busy_timeout_ms = busy_timeout_ms
        self._threads = default_threads() if executor is None else executor
        self.count_executor = count_executor
        self._on_commit = on_commit
        self._writer: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection | None = None
        self._read_lock = asyncio.Lock()
        # Held on the worker thread while a read uses the reader and while ``close`` closes
        # the connections: a read whose caller was cancelled (a background compaction at
        # shutdown) releases ``_read_lock`` at once, while its job still runs; closing the
        # connection under it crashed the process (SIGSEGV inside SQLite).
        self._in_use = threading.Lock()
        self._closed = False
        self._lock_fd: int | None = None

    # -- plumbing ------------------------------------------------------------------

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on a worker thread; its result, or its exception raised here."""
        return await self._threads.run(fn, *args)

    @property
    def writer(self) -> sqlite3.Connection:
        if self._writer is None:
            if self.readonly:
                raise AgentUnavailableError(
                    f"agent {self.agent_id!r} is open read-only here; write through the "
                    "process that holds it (the server's RPC methods)",
                    data={"agent_id": self.agent_id},
                )
            raise AgentUnavailableError(f"agent {self.agent_id!r}: store is closed")
        return self._writer

    async def _write(
        self,
        what: str,
        body: Callable[..., T],
        *args: Any,
        batch_size: int = 1,
    ) -> T:
        started = time.perf_counter()
        txn = write_txn if self.turn_log is None else self._logged_txn
        result: T = await self._threads.run(txn, self.writer, what, body, *args)
        if self._on_commit is not None:  # seconds of the transaction, queueing included
            self._on_commit(time.perf_counter() - started, batch_size)
        return result

    async def log_applied_seq(self) -> int:
        """The turn log sequence the file has applied (cluster mode)."""
        return await self._call(applied_seq, self.writer)

    async def apply_log(self, entries: LogEntries) -> int:
        """Replay turn log entries on the writer (cluster mode: a rebuild)."""
        return await self._call(apply_entries, self.writer, entries)

    @property
    def _logged_txn(self) -> Callable[..., Any]:
        return functools.partial(write_txn, turn_log=self.turn_log)

    def _reader_conn(self) -> sqlite3.Connection:
        if self._reader is None:
            self._reader = connect(
                self.path,
                synchronous=self.synchronous,
                busy_timeout_ms=self.busy_timeout_ms,
                readonly=True,
            )
        return self._reader

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(reader)`` on a worker thread; one read at a time per connection."""

        def run() -> T:
            try:
                with self._in_use:
                    if self._closed:  # a job that outlived its caller: open nothing again
                        raise AgentUnavailableError(f"agent {self.agent_id!r}: store is closed")
                    return fn(self._reader_conn())
            except sqlite3.Error as exc:
                if out_of_descriptors(exc):
                    raise descriptor_error(self.agent_id) from exc
                raise storage_error(exc, "read") from exc

        async with self._read_lock:
            return await self._threads.run(run)

    # -- lifecycle -------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        path: Path,
        agent_id: str,
        *,
        synchronous: Synchronous = "FULL",
        busy_timeout_ms: int = 5000,
        executor: WorkerThreads | None = None,
        on_commit: Callable[[float, int], None] | None = None,
        readonly: bool = False,
        idempotency: IdempotencyRetention = DEFAULT_RETENTION,
        count_executor: WorkerThreads | None = None,
        turn_log: TurnLog | None = None,
    ) -> Self:
        """Open (creating and migrating if needed) the agent file.

        ``executor``: the worker threads every call runs on (``None``: the process's
        default pool, ``default_threads()``).
        ``readonly``: open only a reader, without the agent lock, beside a server that may
        be writing (WAL lets readers and one writer share the file); the file must exist
        and every write raises ``AgentUnavailableError``.
        Raises ``AgentUnavailableError`` when the file is not a usable SQLite database.
        ``on_commit(seconds, writes)`` is called after each write transaction that
        committed (``writes``: how many appends a group commit held, else 1).
        ``idempotency``: how long keyed writes can be replayed (``IdempotencyRetention``).
        ``count_executor``: where a group commit takes its later batches' token counts
        ahead of the writer (``sqlite_ops.append_group``).
        """
        store = cls(
            path,
            agent_id,
            synchronous,
            busy_timeout_ms,
            executor,
            on_commit,
            readonly,
            idempotency,
            count_executor,
            turn_log,
        )
        if readonly:
            version = await store._read(
                lambda conn: int(conn.execute("PRAGMA user_version").fetchone()[0])
            )
            if version < READABLE_SCHEMA_VERSION:
                # A reader cannot migrate it (a server started on it, or any command
                # that opens it read-write, does).
                raise AgentUnavailableError(
                    f"agent {agent_id!r}: its file has schema version {version}, older than "
                    f"this program reads without migrating ({READABLE_SCHEMA_VERSION} to "
                    f"{SCHEMA_VERSION}); open it read-write once (start the server on it) to "
                    "migrate it",
                    data={"agent_id": agent_id},
                )
            await store._read(lambda conn: conn.execute("SELECT 1 FROM sessions LIMIT 1"))
            return store

        def open_writer() -> sqlite3.Connection:
            store.created = not path.exists()
            make_dir(path.parent)
            store._lock_fd = _lock_agent_dir(path.parent, agent_id)
            try:
                left = _wal_left(path)  # before SQLite opens (and so creates) the WAL
                conn = connect(
                    path, synchronous=synchronous, busy_timeout_ms=busy_timeout_ms, readonly=False
                )
                try:
                    # before the migrations: one may drop an index FTS5 cannot open
                    _repair_index_levels(conn, agent_id)
                    migrate(conn)
                    if erase_queued(conn):  # deletes of a plain SQLite client
                        left = True
                    if left:
                        _erase_left_wal(conn, agent_id)
                except BaseException:
                    conn.close()
                    raise
            except BaseException:
                os.close(store._lock_fd)
                store._lock_fd = None
                raise
            return conn

        try:
            store._writer = await store._call(open_writer)
            if store.turn_log is not None:
                await store._attach_log(store.turn_log)
        except (OSError, sqlite3.OperationalError) as exc:
            if out_of_descriptors(exc):
                raise descriptor_error(agent_id) from exc
            if isinstance(exc, OSError):
                raise
            raise AgentUnavailableError(
                f"agent {agent_id!r}: database file {path.name} is unusable ({exc})",
                data={"agent_id": agent_id},
            ) from exc
        except sqlite3.DatabaseError as exc:
            raise AgentUnavailableError(
                f"agent {agent_id!r}: database file {path.name} is unusable ({exc})",
                data={"agent_id": agent_id},
            ) from exc
        return store

    async def _attach_log(self, turn_log: TurnLog) -> None:
        """Cluster mode: seeded ``random()`` on the writer, then the file caught up with
        the log; the store is closed again (its agent lock released) if that fails."""
        try:
            await self._call(install_random, self.writer)
            await turn_log.attach(self)
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        writer, self._writer = self._writer, None  # no write starts from now on
        lock_fd, self._lock_fd = self._lock_fd, None

        def close_all() -> None:
            with self._in_use:  # after any read still running on a worker thread
                self._closed = True
                reader, self._reader = self._reader, None
                for conn in (reader, writer):
                    if conn is not None:
                        with contextlib.suppress(sqlite3.Error):
                            conn.close()
            if lock_fd is not None:
                os.close(lock_fd)  # releases the agent lock

        async with self._read_lock:
            await self._call(close_all)


LOCK_FILE: Final = "agent.lock"


def _lock_agent_dir(folder: Path, agent_id: str) -> int:
    """Take the agent's exclusive lock (``agent.lock``, flock) for as long as it is open.

    One writer per file (DESIGN §4) across processes too: the actor's caches and the
    mirror assume no other process writes while the store is open. A second process
    (a CLI command while the server holds the agent) gets ``AgentUnavailableError``. The
    kernel drops the lock when the holder dies, SIGKILL included.
    """
    fd = try_exclusive_lock(folder / LOCK_FILE)
    if fd is None:
        raise AgentUnavailableError(
            f"agent {agent_id!r} is open in another process (its {LOCK_FILE} is locked); "
            "use that process (for example the server's RPC methods) or stop it first",
            data={"agent_id": agent_id},
        )
    return fd


def _wal_left(path: Path) -> bool:
    """Whether the agent file has a WAL with frames in it: its last writer did not close
    (a crash). A clean close checkpoints the WAL and removes it."""
    try:
        return path.with_name(path.name + "-wal").stat().st_size > 0
    except FileNotFoundError:
        return False


def _repair_index_levels(conn: sqlite3.Connection, agent_id: str) -> None:
    """Rebuild a recall index whose FTS5 structure an older server let grow too deep
    (``recall_levels``; every FTS5 table of the file): past 2000 levels FTS5 reads it as
    corrupt and no write of the agent's events succeeds."""
    for table in fts5_tables(conn):
        levels = repair_levels(conn, table)
        if levels is not None:
            log.warning(
                "agent %r: recall index %s rebuilt (its structure had %d levels)",
                agent_id,
                table,
                levels,
            )


def _erase_left_wal(conn: sqlite3.Connection, agent_id: str) -> None:
    """Checkpoint and truncate a WAL a crash left: a delete committed just before the
    crash (or whose own truncation found the WAL busy) has the deleted text in older
    frames and in the main file's pages until then (``secure_delete`` zeroes only the
    newest copy)."""
    busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
    if busy:
        log.warning("agent %r: the WAL left by a crash is not truncated (busy)", agent_id)
