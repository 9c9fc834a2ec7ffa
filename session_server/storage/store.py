"""The SQLite store of one agent (I/O shell): ``AgentStore``, its operations.

One file per agent (``<memory_dir>/agents/<agent_id>/agent.sqlite``) in WAL mode with two
connections: a writer, used only under the actor's write lock, and a read-only reader,
so reads see the last committed state and never wait for a write in progress (WAL
snapshot isolation). Every operation is one synchronous function (``sqlite_ops``) run on
a worker thread of the registry's pool, the shape of aiosqlite (a worker thread fed a
queue of calls) but with a whole transaction per call: aiosqlite's public API costs one
thread hop per statement, which measured 3-6x slower per turn than raw ``sqlite3`` here.
The connections, opening and closing are ``store_connections.StoreConnections``; the
larger reads are ``event_queries`` and ``context_window``, the mirror columns
``mirror_columns``.

The store does not serialise writers itself: the caller (``AgentActor``) must hold its
write lock around every writer method. Reads are serialised on the reader connection.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Any, Final, TypeVar

from ..values.branches import Branch, ForkResult, RewindResult
from ..values.errors import (
    AgentUnavailableError,
    NotFoundError,
    SessionServerError,
    StorageError,
    UnavailableError,
)
from ..values.events import SessionEvent
from ..values.plans import AppendBatch, AppendOutcome, ContextWindow, SessionState
from ..values.session_rows import SessionRows
from . import branch_sql, recall_sql, session_sql, stream_rows
from . import sqlite_ops as ops
from .context_window import read_context_window
from .event_queries import EVENT_SIZE_SQL, event_query, read_events
from .lineage_sql import count_in_view, delete_from_view, delete_session_rows
from .mirror_columns import (
    MirrorCheckpoint,
    MirrorRow,
    MirrorStatus,
    read_mirror_row,
    read_mirror_statuses,
    save_checkpoints,
)
from .session_rows import read_session_rows, write_session_rows
from .store_connections import StoreConnections
from .stored_rows import read_session_state, session_row
from .transactions import storage_error
from .usage_rows import delete_session_usage

__all__ = [
    "AgentStore",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

_SESSION_COLUMNS: Final = (
    "id, agent_id, created_at, updated_at, metadata, last_seq, parent_session_id, fork_seq"
)


class AgentStore(StoreConnections):
    """Sessions and events of one agent. Create with ``await AgentStore.open(...)``."""

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
            return None if row is None else session_row(row)

        return await self._read(fn)

    async def list_sessions(self) -> list[dict[str, Any]]:
        def fn(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            rows = conn.execute(
                f"SELECT {_SESSION_COLUMNS} FROM sessions"
                " ORDER BY updated_at DESC, created_at DESC, id"
            ).fetchall()
            return [session_row(r) for r in rows]

        return await self._read(fn)

    async def delete_session(self, session_id: str) -> bool:
        deleted, rows = await self._write("delete_session", _delete_session_rows, session_id)
        if deleted or rows:
            await self._erase_after_delete()
        return deleted

    async def delete_sessions(self, session_ids: Sequence[str]) -> tuple[list[str], float]:
        """``delete_session`` of each of ``session_ids`` in one transaction (each with the
        same statements), then the WAL erased once: the ids that existed, and the seconds
        the statements took (what grows with the batch; a sweep sizes its batches by it)."""

        def body(conn: sqlite3.Connection) -> tuple[list[str], int, float]:
            started = time.perf_counter()
            deleted: list[str] = []
            total = 0
            for sid in session_ids:
                existed, rows = _delete_session_rows(conn, sid)
                total += rows
                if existed:
                    deleted.append(sid)
            return deleted, total, time.perf_counter() - started

        deleted, rows, seconds = await self._write("delete_sessions", body)
        if deleted or rows:
            await self._erase_after_delete()
        return deleted, seconds

    async def erase_wal(self) -> None:
        """Checkpoint and truncate the WAL, so text deleted (zeroed, ``secure_delete``)
        does not survive in older WAL frames. A reader holding an old snapshot makes the
        truncation wait up to the busy timeout; if it still cannot, the next delete retries.
        """

        def run() -> None:
            try:
                busy = self.writer.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
            except sqlite3.Error as exc:
                raise storage_error(exc, "checkpoint after delete") from exc
            if busy:
                log.warning("agent %r: WAL not truncated after a delete (busy)", self.agent_id)

        await self._call(run)

    async def _delete(self, what: str, body: Callable[..., T], *args: Any) -> T:
        """A write that deletes or overwrites stored text: ``_write``, then, when its
        result says something went (a count, an event: anything true), the WAL erased
        (``_erase_after_delete``)."""
        result: T = await self._write(what, body, *args)
        if result:
            await self._erase_after_delete()
        return result

    async def _erase_after_delete(self) -> None:
        """``erase_wal`` after a committed delete. A failure is logged, not raised: the
        delete stands, and its caller must still drop the deleted rows from its caches and
        the mirror (an error here once left them served from the actor's cache). The
        deleted text stays in old WAL frames until the next delete or checkpoint. A store
        closed meanwhile (by a local caller beside the delete) is such a failure too."""
        try:
            await self.erase_wal()
            if self.turn_log is not None:  # cluster mode: the log's copies made unreadable
                await self.turn_log.erased()
        except (StorageError, AgentUnavailableError, UnavailableError) as exc:
            log.warning(
                "agent %r: WAL not erased after a delete (%s); the next delete retries",
                self.agent_id,
                exc,
            )

    async def session_rows(self, session_id: str) -> SessionRows | None:
        """Every row SQLite holds about the session, read in one snapshot."""
        return await self._read(lambda conn: read_session_rows(conn, session_id))

    async def insert_session_rows(self, rows: SessionRows) -> None:
        """Write a whole session as it is (ids, seqs, columns); ``ConflictError`` on a clash."""
        await self._write("import session", write_session_rows, rows)

    async def mirror_statuses(self) -> list[MirrorStatus]:
        """Every session's mirror status (activation checks it against the files)."""
        return await self._read(read_mirror_statuses)

    async def mirror_row(self, session_id: str) -> MirrorRow | None:
        """One session's mirror columns; ``None`` when it does not exist."""
        return await self._read(lambda conn: read_mirror_row(conn, session_id))

    async def save_mirror_checkpoints(self, checkpoints: Sequence[MirrorCheckpoint]) -> None:
        """Store the checkpoints of a clean close, all in one transaction."""
        if checkpoints:
            await self._write("store mirror checkpoints", save_checkpoints, checkpoints)

    async def session_state(self, session_id: str) -> SessionState | None:
        """Internal columns of a session (last seq, strategy, flag, mirror cursor)."""
        return await self._read(lambda conn: read_session_state(conn, session_id))

    async def set_session_strategy(self, session_id: str, strategy: str | None) -> None:
        """Store a session's strategy (JSON text; ``None`` clears it)."""
        await self._write("set strategy", _update_session, session_id, "strategy", strategy)

    # -- live turns (``stream_rows``; the actor's ``runtime.live_streams``) --------------

    async def load_streams(self) -> list[stream_rows.StoredStream]:
        return await self._read(stream_rows.load_streams)

    async def stream_counters(self, session_id: str) -> tuple[int, int] | None:
        return await self._read(lambda conn: stream_rows.read_counters(conn, session_id))

    async def open_stream(self, *args: Any) -> None:
        await self._write("stream.open", stream_rows.open_stream, *args)

    async def write_stream_segments(self, items: Sequence[stream_rows.SegmentItem]) -> None:
        await self._write("stream.append", stream_rows.write_segments, items)

    async def end_stream(self, session_id: str, stream_id: str) -> None:
        """Abandon the stream: its chunks deleted, then the WAL erased."""
        await self._write("stream.close", stream_rows.end_stream, session_id, stream_id)
        await self._erase_after_delete()

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
            "append_events",
            ops.append_group,
            batches,
            self.idempotency,
            self.count_executor,
            batch_size=len(batches),
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

        def fn(conn: sqlite3.Connection) -> int:
            return count_in_view(conn, session_id, f"SUM({EVENT_SIZE_SQL})", "1", ())

        return await self._read(fn)

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
        query = event_query(
            session_id,
            max_bytes=max_bytes,
            partial=partial,
            limit=limit,
            tail=tail,
            since=since,
            after_seq=after_seq,
            actions=actions,
        )
        if query is None:
            return [], True
        return await self._read(lambda conn: read_events(conn, query))

    async def delete_events(self, session_id: str, event_ids: Sequence[str]) -> int:
        if not event_ids:
            return 0

        def body(conn: sqlite3.Connection) -> int:
            deleted = delete_from_view(conn, session_id, event_ids)  # through its lineage
            if deleted:
                ops.invalidate_mirror(conn, session_id)
            return int(deleted)

        deleted: int = await self._delete("delete_events", body)
        return deleted

    # -- session edits beside the turn path (bodies in ``session_sql``) -----------------

    async def replace_metadata(
        self, session_id: str, metadata: Mapping[str, Any] | None, merge: bool = False
    ) -> dict[str, Any]:
        row: dict[str, Any] = await self._write(
            "update_session", session_sql.replace_metadata, session_id, metadata, merge
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
        count: bool = True,
    ) -> tuple[list[dict[str, Any]], int | None]:
        return await self._read(
            lambda conn: session_sql.list_sessions_page(
                conn,
                metadata=metadata,
                limit=limit,
                offset=offset,
                only=only,
                after=after,
                count=count,
            )
        )

    async def pop_event(
        self,
        session_id: str,
        event_id: str | None,
        replacement: tuple[SessionEvent, int] | None,
    ) -> SessionEvent | None:
        # Removed, or rewritten in place: the event's text goes either way.
        popped: SessionEvent | None = await self._delete(
            "pop_event", session_sql.pop_event, session_id, event_id, replacement
        )
        return popped

    async def clear_events(self, session_id: str) -> int:
        deleted: int = await self._delete("clear_session", session_sql.clear_events, session_id)
        return deleted

    # -- branches (bodies in ``branch_sql``) ---------------------------------------------

    async def fork_session(
        self, source_id: str, new_id: str, at_seq: int | None, metadata: str | None,
        *, inherit_metadata: bool,
    ) -> ForkResult:  # fmt: skip
        result: ForkResult = await self._write(
            "fork_session",
            lambda conn: branch_sql.fork_session(
                conn, self.agent_id, source_id, new_id, at_seq, metadata,
                inherit_metadata=inherit_metadata,
            ),
        )  # fmt: skip
        return result

    async def rewind_session(
        self, session_id: str, to_seq: int, *, reason: str | None, erase: bool, branch_id: str
    ) -> RewindResult:
        result: RewindResult = await self._write(
            "rewind_session",
            lambda conn: branch_sql.rewind_session(
                conn, self.agent_id, session_id, to_seq,
                reason=reason, erase=erase, branch_id=branch_id,
            ),
        )  # fmt: skip
        if result.erased or erase:  # erased text (blocks too) leaves the WAL, as a delete's
            await self._erase_after_delete()
        return result

    async def branches(self, session_id: str) -> list[Branch]:
        return await self._read(lambda conn: branch_sql.list_branches(conn, session_id))

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
        one rule of ``values.turns`` (``widening_turns``, ``window_from``).
        """
        return await self._read(
            lambda conn: read_context_window(conn, session_id, limit, from_seq, from_record)
        )

    async def count_events(self, session_id: str, from_seq: int, before_seq: int) -> int:
        """How many non-compaction events have ``from_seq <= seq < before_seq``."""

        def fn(conn: sqlite3.Connection) -> int:
            return count_in_view(
                conn, session_id, "COUNT(*)", "seq >= ? AND seq < ? AND action != 'compaction'",
                (from_seq, before_seq),
            )  # fmt: skip

        return await self._read(fn)

    # -- bodies of other modules (``block_sql``, ``usage_rows``) ---------------------------

    async def query(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn(conn)`` on the read connection, on a worker thread."""
        return await self._read(fn)

    async def transact(self, what: str, body: Callable[..., T], *args: Any) -> T:
        """``body(conn, *args)`` as one write transaction (the caller holds the write lock)."""
        result: T = await self._write(what, body, *args)
        return result

    async def transact_erasing(self, what: str, body: Callable[..., T], *args: Any) -> T:
        """``transact`` for a body that removes rows: the WAL erased after it when it did."""
        return await self._delete(what, body, *args)

    # -- recall (``recall_sql``) -----------------------------------------------------------

    async def recall_search(
        self, query: recall_sql.RecallFilter
    ) -> tuple[list[dict[str, Any]], bool]:
        """The best hits of ``query`` and whether the index is still being built."""
        return await self._read(lambda conn: recall_sql.search(conn, query))

    async def recall_pending(self) -> bool:
        """Whether stored events are still to index (a migrated file, a reindex)."""
        return await self._read(recall_sql.backfill_pending)

    async def recall_backfill(self, rows: int) -> int:
        """Index up to ``rows`` events still to index, in one transaction (0: done)."""
        return await self._write("recall backfill", recall_sql.backfill_step, rows)

    async def recall_reset(self) -> int:
        """Empty the index; every event is to index again. The number of events."""
        return await self._write("recall reset", recall_sql.reset_index)

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


def _delete_session_rows(conn: sqlite3.Connection, session_id: str) -> tuple[bool, int]:
    """Inside a delete's transaction: the session row and every row of the session
    (secure delete zeroes them); whether the row existed, and the other rows deleted."""
    deleted = conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,)).rowcount > 0
    rows = delete_session_usage(conn, session_id)
    rows += delete_session_rows(conn, session_id)  # what its forks read stays
    for table in (
        "tool_calls",
        "idempotency",
        "streams",
        "stream_segments",
        "memory_blocks",
        "rewinds",
    ):
        rows += conn.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,)).rowcount
    return deleted, rows


def _update_session(conn: sqlite3.Connection, session_id: str, column: str, value: Any) -> None:
    cur = conn.execute(f"UPDATE sessions SET {column} = ? WHERE id = ?", (value, session_id))
    if cur.rowcount == 0:
        raise NotFoundError.session(session_id)
