"""The SQLite store of one agent (I/O shell).

One file per agent (``<memory_dir>/agents/<agent_id>/agent.sqlite``) in WAL mode with two
connections: a writer, used only under the actor's write lock, and a read-only reader,
so reads see the last committed state and never wait for a write in progress (WAL
snapshot isolation). Every operation is one synchronous function (``sqlite_ops``) run on
a worker thread of the registry's pool, the shape of aiosqlite (a worker thread fed a
queue of calls) but with a whole transaction per call: aiosqlite's public API costs one
thread hop per statement, which measured 3-6x slower per turn than raw ``sqlite3`` here.

The store does not serialise writers itself: the caller (``AgentActor``) must hold its
write lock around every writer method. Reads are serialised on the reader connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

import msgspec

from ..core.errors import (
    AgentUnavailableError,
    CorruptRecordError,
    InvalidParamsError,
    NotFoundError,
    SessionServerError,
)
from ..core.events import ACTIONS, SessionEvent
from ..core.plans import AppendBatch, AppendOutcome, AppendResult, ContextWindow, SessionState
from ..core.records import CompactionRecord
from ..core.session_rows import SessionRows
from ..core.turns import widening_turns, window_from
from ..limits import descriptor_error, out_of_descriptors
from . import session_sql
from . import sqlite_ops as ops
from .file_lock import try_exclusive_lock
from .file_modes import make_dir
from .schema import SCHEMA_VERSION
from .session_rows import read_session_rows, write_session_rows
from .sqlite_ops import EVENT_COLUMNS

# An event's size in an answer, about: its text columns plus the JSON around them
# (id, seq, action, timestamps and keys take more than EVENT_OVERHEAD bytes).
EVENT_OVERHEAD: Final = 160
EVENT_SIZE_SQL: Final = (
    "COALESCE(LENGTH(CAST(content AS BLOB)), 0)"
    f" + COALESCE(LENGTH(CAST(metadata AS BLOB)), 0) + {EVENT_OVERHEAD}"
)

__all__ = [
    "EVENT_OVERHEAD",
    "EVENT_SIZE_SQL",
    "AgentStore",
    "AppendResult",
    "ContextWindow",
    "MirrorCheckpoint",
    "MirrorRow",
    "MirrorStatus",
    "Synchronous",
]

Synchronous = Literal["FULL", "NORMAL"]
log = logging.getLogger(__name__)
T = TypeVar("T")

_SESSION_COLUMNS: Final = "id, agent_id, created_at, updated_at, metadata, last_seq"


class MirrorRow(msgspec.Struct, frozen=True):
    """What SQLite holds about a session's mirror: the cursor (``-1``: marked stale by a
    delete), the checkpoint of the last clean close and its file stamps (JSON text)."""

    session_id: str
    last_seq: int
    mirror_seq: int
    mirror_state: str | None
    mirror_files: str | None


class MirrorStatus(msgspec.Struct, frozen=True):
    """A session's mirror columns as activation checks them (the checkpoint not read)."""

    session_id: str
    last_seq: int
    mirror_seq: int
    has_checkpoint: bool
    mirror_files: str | None


class MirrorCheckpoint(msgspec.Struct, frozen=True):
    """Stored at a clean close: the mirror cursor, the writer's checkpoint, the file
    stamps and the snapshot binding (seq, SHA-256) when a snapshot was written."""

    session_id: str
    mirror_seq: int
    state: str
    files: str
    snapshot: tuple[int, str] | None = None


_MIRROR_COLUMNS: Final = "id, last_seq, mirror_seq, mirror_state, mirror_files"


def _mirror_row(row: sqlite3.Row) -> MirrorRow:
    return MirrorRow(str(row[0]), int(row[1]), int(row[2]), row[3], row[4])


def _save_checkpoints(conn: sqlite3.Connection, checkpoints: Sequence[MirrorCheckpoint]) -> None:
    for cp in checkpoints:
        conn.execute(
            "UPDATE sessions SET mirror_seq = ?, mirror_state = ?, mirror_files = ? WHERE id = ?",
            (cp.mirror_seq, cp.state, cp.files, cp.session_id),
        )
        if cp.snapshot is not None:
            conn.execute(
                "UPDATE sessions SET snapshot_seq = ?, snapshot_digest = ? WHERE id = ?",
                (cp.snapshot[0], cp.snapshot[1], cp.session_id),
            )


class AgentStore:
    """Sessions and events of one agent. Create with ``await AgentStore.open(...)``."""

    def __init__(
        self,
        path: Path,
        agent_id: str,
        synchronous: Synchronous,
        busy_timeout_ms: int,
        executor: Executor | None,
        on_commit: Callable[[float, int], None] | None = None,
        readonly: bool = False,
        idempotency: ops.IdempotencyRetention = ops.DEFAULT_RETENTION,
    ) -> None:
        self.path = path
        self.idempotency = idempotency
        self.readonly = readonly
        # True when ``open`` made a new file: no session was ever in it (activation then
        # leaves any folder beside it alone: the server wrote none of them).
        self.created = False
        self.agent_id = agent_id
        self.synchronous = synchronous
        self.busy_timeout_ms = busy_timeout_ms
        self._executor = executor
        self._on_commit = on_commit
        self._writer: sqlite3.Connection | None = None
        self._reader: sqlite3.Connection | None = None
        self._read_lock = asyncio.Lock()
        self._lock_fd: int | None = None

    # -- plumbing ------------------------------------------------------------------

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, *args)

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

    async def _write(self, what: str, body: Callable[..., T], *args: Any, batch_size: int = 1) -> T:
        started = time.perf_counter()
        result: T = await self._call(ops.write_txn, self.writer, what, body, *args)
        if self._on_commit is not None:  # seconds of the transaction, queueing included
            self._on_commit(time.perf_counter() - started, batch_size)
        return result

    def _reader_conn(self) -> sqlite3.Connection:
        if self._reader is None:
            self._reader = ops.connect(
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
                return fn(self._reader_conn())
            except sqlite3.Error as exc:
                if out_of_descriptors(exc):
                    raise descriptor_error(self.agent_id) from exc
                raise ops.storage_error(exc, "read") from exc

        async with self._read_lock:
            return await self._call(run)

    # -- lifecycle -------------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        path: Path,
        agent_id: str,
        *,
        synchronous: Synchronous = "FULL",
        busy_timeout_ms: int = 5000,
        executor: Executor | None = None,
        on_commit: Callable[[float, int], None] | None = None,
        readonly: bool = False,
        idempotency: ops.IdempotencyRetention = ops.DEFAULT_RETENTION,
    ) -> AgentStore:
        """Open (creating and migrating if needed) the agent file.

        ``readonly``: open only a reader, without the agent lock, beside a server that may
        be writing (WAL lets readers and one writer share the file); the file must exist
        and every write raises ``AgentUnavailableError``.
        Raises ``AgentUnavailableError`` when the file is not a usable SQLite database.
        ``on_commit(seconds, writes)`` is called after each write transaction that
        committed (``writes``: how many appends a group commit held, else 1).
        ``idempotency``: how long keyed writes can be replayed (``IdempotencyRetention``).
        """
        store = cls(
            path, agent_id, synchronous, busy_timeout_ms, executor, on_commit, readonly, idempotency
        )
        if readonly:
            version = await store._read(
                lambda conn: int(conn.execute("PRAGMA user_version").fetchone()[0])
            )
            if version < SCHEMA_VERSION:
                # A reader cannot migrate it (a server started on it, or any command
                # that opens it read-write, does).
                raise AgentUnavailableError(
                    f"agent {agent_id!r}: its file has schema version {version}, older than "
                    f"this program's ({SCHEMA_VERSION}); open it read-write once (start the "
                    "server on it) to migrate it",
                    data={"agent_id": agent_id},
                )
            await store._read(lambda conn: conn.execute("SELECT 1 FROM sessions LIMIT 1"))
            return store

        def open_writer() -> sqlite3.Connection:
            store.created = not path.exists()
            make_dir(path.parent)
            store._lock_fd = _lock_agent_dir(path.parent, agent_id)
            try:
                conn = ops.connect(
                    path, synchronous=synchronous, busy_timeout_ms=busy_timeout_ms, readonly=False
                )
                try:
                    ops.migrate(conn)
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

    async def close(self) -> None:
        conns = [c for c in (self._reader, self._writer) if c is not None]
        self._reader = self._writer = None
        lock_fd, self._lock_fd = self._lock_fd, None

        def close_all() -> None:
            for conn in conns:
                with contextlib.suppress(sqlite3.Error):
                    conn.close()
            if lock_fd is not None:
                os.close(lock_fd)  # releases the agent lock

        async with self._read_lock:
            await self._call(close_all)

    # -- sessions ------------------------------------------------------------------------

    async def create_session(self, metadata: dict[str, Any] | None, session_id: str) -> str:
        def body(conn: sqlite3.Connection) -> str:
            ops.insert_session(conn, self.agent_id, session_id, metadata)
            return session_id

        return await self._write("create_session", body)

    async def get_session(self, session_id: str) -> dict[str, Any] | None:
        def fn(conn: sqlite3.Connection) -> dict[str, Any] | None:
            row = conn.execute(
                f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            return None if row is None else ops.session_row(row)

        return await self._read(fn)

    async def list_sessions(self) -> list[dict[str, Any]]:
        def fn(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            rows = conn.execute(
                f"SELECT {_SESSION_COLUMNS} FROM sessions"
                " ORDER BY updated_at DESC, created_at DESC, id"
            ).fetchall()
            return [ops.session_row(r) for r in rows]

        return await self._read(fn)

    async def delete_session(self, session_id: str) -> bool:
        def body(conn: sqlite3.Connection) -> tuple[bool, int]:
            deleted = conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount > 0
            rows = 0
            for table in ("events", "tool_calls", "idempotency"):
                rows += conn.execute(
                    f"DELETE FROM {table} WHERE session_id = ?", (session_id,)
                ).rowcount
            return deleted, rows

        deleted, rows = await self._write("delete_session", body)
        if deleted or rows:
            await self.erase_wal()
        return deleted

    async def erase_wal(self) -> None:
        """Checkpoint and truncate the WAL, so text deleted (zeroed, ``secure_delete``)
        does not survive in older WAL frames. A reader holding an old snapshot makes the
        truncation wait up to the busy timeout; if it still cannot, the next delete retries.
        """

        def run() -> None:
            try:
                busy = self.writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            except sqlite3.Error as exc:
                raise ops.storage_error(exc, "checkpoint after delete") from exc
            if busy:
                log.warning("agent %r: WAL not truncated after a delete (busy)", self.agent_id)

        await self._call(run)

    async def session_rows(self, session_id: str) -> SessionRows | None:
        """Every row SQLite holds about the session, read in one snapshot."""
        return await self._read(lambda conn: read_session_rows(conn, session_id))

    async def insert_session_rows(self, rows: SessionRows) -> None:
        """Write a whole session as it is (ids, seqs, columns); ``ConflictError`` on a clash."""
        await self._write("import session", write_session_rows, rows)

    async def mirror_statuses(self) -> list[MirrorStatus]:
        """Every session's mirror status (activation checks it against the files)."""

        def fn(conn: sqlite3.Connection) -> list[MirrorStatus]:
            rows = conn.execute(
                "SELECT id, last_seq, mirror_seq, mirror_state IS NOT NULL, mirror_files"
                " FROM sessions"
            )
            return [MirrorStatus(str(r[0]), int(r[1]), int(r[2]), bool(r[3]), r[4]) for r in rows]

        return await self._read(fn)

    async def mirror_row(self, session_id: str) -> MirrorRow | None:
        """One session's mirror columns; ``None`` when it does not exist."""

        def fn(conn: sqlite3.Connection) -> MirrorRow | None:
            row = conn.execute(
                f"SELECT {_MIRROR_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            return None if row is None else _mirror_row(row)

        return await self._read(fn)

    async def save_mirror_checkpoints(self, checkpoints: Sequence[MirrorCheckpoint]) -> None:
        """Store the checkpoints of a clean close, all in one transaction."""
        if checkpoints:
            await self._write("store mirror checkpoints", _save_checkpoints, checkpoints)

    async def session_state(self, session_id: str) -> SessionState | None:
        """Internal columns of a session (last seq, strategy, flag, mirror cursor)."""
        return await self._read(lambda conn: ops.read_session_state(conn, session_id))

    async def set_session_strategy(self, session_id: str, strategy: str | None) -> None:
        """Store a session's strategy (JSON text; ``None`` clears it)."""
        await self._write("set strategy", _update_session, session_id, "strategy", strategy)

    # -- events ------------------------------------------------------------------------

    async def append(self, batch: AppendBatch) -> AppendOutcome:
        """Run ``batch`` in one transaction; all or nothing (see ``sqlite_ops.append``).

        ``batch.mirror_seq``, when given, records the JSONL mirror cursor in the same
        transaction (the actor passes the cursor confirmed by the previous append, so the
        stored cursor lags by at most one append and a crash is always detected on
        activation).
        """
        return await self._write("append_events", ops.append, batch, self.idempotency)

    async def append_group(
        self, batches: Sequence[AppendBatch]
    ) -> list[AppendOutcome | SessionServerError]:
        """Append several batches in one transaction (one commit, one fsync): each is
        atomic on its own, and a refused one is answered by its error in its place
        (``sqlite_ops.append_group``). A failure of the transaction itself raises.
        """
        if len(batches) == 1:  # no savepoint needed: the transaction is the batch
            try:
                return [await self.append(batches[0])]
            except SessionServerError as exc:
                return [exc]
        return await self._write(
            "append_events", ops.append_group, batches, self.idempotency, batch_size=len(batches)
        )

    async def load_events(
        self,
        session_id: str,
        *,
        limit: int | None = 50,
        tail: bool = True,
        since: int | None = None,
        after_seq: int | None = None,
        actions: Iterable[str] | None = None,
    ) -> list[SessionEvent]:
        """Events of a session, oldest first; filters apply before the limit.

        ``tail=True`` gives the last ``limit`` matching events, ``tail=False`` the first.
        ``since`` is a ms timestamp (inclusive); ``after_seq`` is exclusive.
        """
        events, _complete = await self.load_events_bounded(
            session_id, limit=limit, tail=tail, since=since, after_seq=after_seq, actions=actions
        )
        return events

    async def events_bytes(self, session_id: str) -> int:
        """About how many bytes the session's events take in JSON (``EVENT_SIZE_SQL``
        summed by SQLite: nothing is read into Python)."""
        sql = f"SELECT COALESCE(SUM({EVENT_SIZE_SQL}), 0) FROM events WHERE session_id = ?"
        return await self._read(lambda conn: int(conn.execute(sql, (session_id,)).fetchone()[0]))

    async def load_events_bounded(
        self,
        session_id: str,
        *,
        max_bytes: int | None = None,
        partial: bool = True,
        limit: int | None = 50,
        tail: bool = True,
        since: int | None = None,
        after_seq: int | None = None,
        actions: Iterable[str] | None = None,
    ) -> tuple[list[SessionEvent], bool]:
        """``load_events``, and with ``max_bytes`` no more events than fit in about that
        many bytes of JSON (``EVENT_SIZE_SQL``; always at least one): ``(events, complete)``
        with ``complete`` false when events were left out for size (and then, unless
        ``partial``, no events: the caller refuses the whole).

        SQLite sums the sizes first (no row reaches Python beyond the bound; the sum
        looks at no more rows than could fit), so memory and work stay about
        ``max_bytes`` however long the session.
        """
        where = ["session_id = ?"]
        args: list[Any] = [session_id]
        if since is not None:
            where.append("created_at >= ?")
            args.append(since)
        if after_seq is not None:
            where.append("seq > ?")
            args.append(after_seq)
        if actions is not None:
            acts = list(actions)
            unknown = [a for a in acts if a not in ACTIONS]
            if unknown:
                raise InvalidParamsError(
                    f"actions: unknown action(s) {unknown}; known: {list(ACTIONS)}",
                    data={"field": "actions"},
                )
            if not acts:
                return [], True
            where.append(f"action IN ({','.join('?' * len(acts))})")
            args.extend(acts)
        order = "DESC" if tail else "ASC"
        cond = " AND ".join(where)
        limit_sql = "" if limit is None else f" LIMIT {max(0, int(limit))}"
        sql = f"SELECT {EVENT_COLUMNS} FROM events WHERE {cond} ORDER BY seq {order}{limit_sql}"
        # The first seq (in reading order) at which the running size passes max_bytes;
        # every event counts at least EVENT_OVERHEAD, so no more rows need summing.
        most = 1 if max_bytes is None else max_bytes // EVENT_OVERHEAD + 1
        rows_bound = f" LIMIT {most if limit is None else min(most, max(0, int(limit)))}"
        cut_sql = (
            f"SELECT seq, first FROM (SELECT seq, SUM({EVENT_SIZE_SQL}) OVER (ORDER BY seq "
            f"{order}) AS running, ROW_NUMBER() OVER (ORDER BY seq {order}) = 1 AS first "
            f"FROM (SELECT * FROM events WHERE {cond} ORDER BY seq {order}{rows_bound})) "
            "WHERE running > ? LIMIT 1"
        )

        def fn(conn: sqlite3.Connection) -> tuple[list[SessionEvent], bool]:
            query, params, complete = sql, args, True
            if max_bytes is not None:
                cut = conn.execute(cut_sql, [*args, max_bytes]).fetchone()
                if cut is not None:
                    complete = False
                    if not partial:
                        return [], False
                    # Stop before the row that passes the bound (at it, when it is the first).
                    op = ("<" if not tail else ">") + ("=" if cut[1] else "")
                    query = (
                        f"SELECT {EVENT_COLUMNS} FROM events WHERE {cond} AND seq {op} ? "
                        f"ORDER BY seq {order}{limit_sql}"
                    )
                    params = [*args, cut[0]]
            events = ops.rows_to_events(conn.execute(query, params).fetchall())
            if tail:
                events.reverse()
            return events, complete

        return await self._read(fn)

    async def delete_events(self, session_id: str, event_ids: Sequence[str]) -> int:
        if not event_ids:
            return 0
        marks = ",".join("?" * len(event_ids))

        def body(conn: sqlite3.Connection) -> int:
            deleted = conn.execute(
                f"DELETE FROM events WHERE session_id = ? AND id IN ({marks})",
                (session_id, *event_ids),
            ).rowcount
            if deleted:
                ops.invalidate_mirror(conn, session_id)
            return int(deleted)

        deleted = await self._write("delete_events", body)
        if deleted:
            await self.erase_wal()
        return deleted

    # -- session edits beside the turn path (bodies in ``session_sql``) -----------------

    async def replace_metadata(
        self, session_id: str, metadata: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        row: dict[str, Any] = await self._write(
            "update_session", session_sql.replace_metadata, session_id, metadata
        )
        return row

    async def list_sessions_page(
        self,
        *,
        metadata: Mapping[str, Any] | None,
        limit: int | None,
        offset: int,
        only: Collection[str] | None,
        after: tuple[int, int, str] | None = None,
    ) -> tuple[list[dict[str, Any]], int]:
        return await self._read(
            lambda conn: session_sql.list_sessions_page(
                conn, metadata=metadata, limit=limit, offset=offset, only=only, after=after
            )
        )

    async def pop_event(
        self,
        session_id: str,
        event_id: str | None,
        replacement: tuple[SessionEvent, int] | None,
    ) -> SessionEvent | None:
        popped: SessionEvent | None = await self._write(
            "pop_event", session_sql.pop_event, session_id, event_id, replacement
        )
        return popped

    async def clear_events(self, session_id: str) -> int:
        deleted: int = await self._write("clear_session", session_sql.clear_events, session_id)
        return deleted

    async def context_window(
        self,
        session_id: str,
        *,
        limit: int | None,
        from_seq: int | None = None,
        from_record: bool = False,
    ) -> ContextWindow:
        """A tool-pair-safe window for a working context, read in one snapshot.

        With ``from_seq``, the events from that seq on (at most the last ``limit``);
        otherwise the last ``limit`` events. A cut that would split a tool call from its
        results moves to the nearest turn boundary; results whose call lies before
        everything loaded are dropped from the window (they stay stored).
        ``from_record`` takes ``from_seq`` from the latest compaction record instead
        (``CompactionRecord.from_seq``), read in the same snapshot. The widening is the
        one rule of ``core.turns`` (``widening_turns``, ``window_from``).
        """
        return await self._read(
            lambda conn: _context_window(conn, session_id, limit, from_seq, from_record)
        )

    async def count_events(self, session_id: str, from_seq: int, before_seq: int) -> int:
        """How many non-compaction events have ``from_seq <= seq < before_seq``."""

        def fn(conn: sqlite3.Connection) -> int:
            row = conn.execute(
                "SELECT COUNT(*) FROM events WHERE session_id = ? AND seq >= ? AND seq < ?"
                " AND action != 'compaction'",
                (session_id, from_seq, before_seq),
            ).fetchone()
            return int(row[0])

        return await self._read(fn)

    async def get_setting(self, key: str) -> str | None:
        def fn(conn: sqlite3.Connection) -> str | None:
            row = conn.execute("SELECT value FROM agent_settings WHERE key = ?", (key,)).fetchone()
            return None if row is None else str(row[0])

        return await self._read(fn)

    async def set_setting(self, key: str, value: str) -> None:
        def body(conn: sqlite3.Connection) -> None:
            conn.execute(
                "INSERT INTO agent_settings (key, value) VALUES (?, ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

        await self._write("set_setting", body)

    async def delete_setting(self, key: str) -> None:
        def body(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM agent_settings WHERE key = ?", (key,))

        await self._write("delete_setting", body)


def _update_session(conn: sqlite3.Connection, session_id: str, column: str, value: Any) -> None:
    cur = conn.execute(f"UPDATE sessions SET {column} = ? WHERE id = ?", (value, session_id))
    if cur.rowcount == 0:
        raise NotFoundError.session(session_id)


def _context_window(
    conn: sqlite3.Connection,
    session_id: str,
    limit: int | None,
    from_seq: int | None,
    from_record: bool,
) -> ContextWindow:
    conn.execute("BEGIN")  # one read snapshot for the session row and the events
    try:
        state = ops.read_session_state(conn, session_id)
        if state is None:
            raise NotFoundError.session(session_id)
        crow = conn.execute(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE session_id = ?"
            " AND action = 'compaction' ORDER BY seq DESC LIMIT 1",
            (session_id,),
        ).fetchone()
        record_event = None if crow is None else ops.hydrate_or_skip(crow)
        record: CompactionRecord | None = None
        if record_event is not None:
            try:
                record = CompactionRecord.of(record_event)
            except CorruptRecordError as exc:  # the history reads as if uncompacted
                ops.SKIPPED_RECORDS.note(exc)
        if from_record:
            from_seq = None if record is None else record.from_seq
        where = "session_id = ?"
        args: list[Any] = [session_id]
        if from_seq is not None:
            where += " AND seq >= ?"
            args.append(from_seq)
        sql = f"SELECT {EVENT_COLUMNS} FROM events WHERE {where} ORDER BY seq DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(max(0, int(limit)))
        rows = conn.execute(sql, args).fetchall()
        rows.reverse()
        events = ops.rows_to_events(rows)
        prefix: list[SessionEvent] = []
        if events and limit is not None and len(rows) >= limit:
            needed = widening_turns(events)
            if needed:
                # Each needed turn is the turn of an event in the window: its row has the
                # seq of the turn's opening message.
                opening = {int(r["turn"]): int(r["turn_start_seq"]) for r in rows}
                lower = min(opening[t] for t in needed)
                if from_seq is not None:
                    lower = max(lower, from_seq)
                if lower < events[0].seq:
                    prefix = ops.rows_to_events(
                        conn.execute(
                            f"SELECT {EVENT_COLUMNS} FROM events WHERE session_id = ?"
                            " AND seq >= ? AND seq < ? ORDER BY seq",
                            (session_id, lower, events[0].seq),
                        ).fetchall()
                    )
        loaded = [*prefix, *events]
        complete = from_seq is None and (
            not loaded
            or conn.execute(
                "SELECT 1 FROM events WHERE session_id = ? AND seq < ? LIMIT 1",
                (session_id, loaded[0].seq),
            ).fetchone()
            is None
        )
    finally:
        conn.execute("COMMIT")
    return ContextWindow(
        events=window_from(loaded, len(prefix)),
        state=state,
        suffix=loaded,
        complete=complete,
        record=record,
    )


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
