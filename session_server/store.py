"""The SQLite store of one agent (I/O shell, on aiosqlite).

One file per agent (``<memory_dir>/agents/<agent_id>/agent.sqlite``) in WAL mode. Two
connections: a writer, used only under the actor's write lock, that runs each write as one
``BEGIN IMMEDIATE`` ... ``COMMIT`` transaction; and a read-only reader, so reads see the
last committed state and never wait for a write in progress (WAL snapshot isolation).

The store does not serialise writers itself: the caller (``AgentActor``) must hold its
write lock around every writer method.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final, Literal

import aiosqlite
import msgspec

from .codec import dehydrate_event, encode_json, hydrate_event, now_ms
from .errors import (
    AgentUnavailableError,
    ConflictError,
    CorruptRecordError,
    InvalidParamsError,
    NotFoundError,
    StorageError,
)
from .events import ACTIONS, SessionEvent
from .migrations import migrate
from .turns import drop_orphan_results, safe_window_start

__all__ = ["AgentStore", "AppendResult", "ContextWindow", "Synchronous"]

Synchronous = Literal["FULL", "NORMAL"]

_EVENT_COLUMNS: Final = (
    "id, session_id, seq, action, content, metadata, created_at, turn, turn_start_seq, token_count"
)
_SESSION_COLUMNS: Final = "id, agent_id, created_at, updated_at, metadata, last_seq"
_DECODER: Final = msgspec.json.Decoder()


class AppendResult(msgspec.Struct):
    """What an append wrote: the seqs of the new events, and the session's last seq."""

    seqs: list[int]
    last_seq: int
    compaction_required: bool = False


class ContextWindow(msgspec.Struct):
    """Events of a context window (oldest first) and the session seq they were read at."""

    events: list[SessionEvent]
    last_seq: int
    compaction_required: bool
    strategy: dict[str, Any] | None


def _storage_error(exc: sqlite3.Error, what: str) -> StorageError:
    return StorageError(f"{what} failed: {exc}", data={"sqlite_error": str(exc)})


def _session_row(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    raw = out.get("metadata")
    if raw is not None:
        try:
            out["metadata"] = _DECODER.decode(raw)
        except msgspec.DecodeError as exc:
            raise CorruptRecordError(
                f"session {out['id']!r}: field 'metadata' is not valid JSON"
            ) from exc
    return out


class AgentStore:
    """Sessions and events of one agent. Create with ``await AgentStore.open(...)``."""

    def __init__(self, path: Path, agent_id: str, synchronous: Synchronous, busy_timeout_ms: int):
        self.path = path
        self.agent_id = agent_id
        self.synchronous = synchronous
        self.busy_timeout_ms = busy_timeout_ms
        self._writer: aiosqlite.Connection | None = None
        self._reader: aiosqlite.Connection | None = None
        # Multi-statement reads share the reader connection; one at a time.
        self._read_lock = asyncio.Lock()

    # -- lifecycle ---------------------------------------------------------------

    @classmethod
    async def open(
        cls,
        path: Path,
        agent_id: str,
        *,
        synchronous: Synchronous = "FULL",
        busy_timeout_ms: int = 5000,
    ) -> AgentStore:
        """Open (creating and migrating if needed) the agent file.

        Raises ``AgentUnavailableError`` when the file is not a usable SQLite database.
        """
        store = cls(path, agent_id, synchronous, busy_timeout_ms)
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            store._writer = await store._connect(readonly=False)
            await migrate(store._writer)
        except sqlite3.DatabaseError as exc:
            await store.close()
            raise AgentUnavailableError(
                f"agent {agent_id!r}: database file {path.name} is unusable ({exc})",
                data={"agent_id": agent_id},
            ) from exc
        return store

    async def _connect(self, *, readonly: bool) -> aiosqlite.Connection:
        conn = await aiosqlite.connect(self.path, isolation_level=None)
        try:
            conn.row_factory = sqlite3.Row
            await conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout_ms)}")
            # Any read fails here on a file that is not a SQLite database.
            await conn.execute("PRAGMA journal_mode=WAL")
            await conn.execute(f"PRAGMA synchronous={self.synchronous}")
            if readonly:
                await conn.execute("PRAGMA query_only=1")
        except BaseException:
            await conn.close()
            raise
        return conn

    async def _read_conn(self) -> aiosqlite.Connection:
        if self._reader is None:
            self._reader = await self._connect(readonly=True)
        return self._reader

    @property
    def writer(self) -> aiosqlite.Connection:
        if self._writer is None:
            raise StorageError(f"agent {self.agent_id!r}: store is closed")
        return self._writer

    async def close(self) -> None:
        for conn in (self._reader, self._writer):
            if conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    await conn.close()
        self._reader = self._writer = None

    # -- transactions --------------------------------------------------------------

    async def _begin(self) -> None:
        try:
            await self.writer.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise _storage_error(exc, "BEGIN") from exc

    async def _commit(self) -> None:
        try:
            await self.writer.execute("COMMIT")
        except sqlite3.Error as exc:
            await self._rollback()
            raise _storage_error(exc, "COMMIT") from exc

    async def _rollback(self) -> None:
        try:
            if self.writer.in_transaction:
                await self.writer.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # the connection rolls back by itself when the statement failed hard

    # -- sessions ------------------------------------------------------------------

    async def create_session(self, metadata: dict[str, Any] | None, session_id: str) -> str:
        now = now_ms()
        meta = None if metadata is None else encode_json(metadata)
        await self._begin()
        try:
            await self.writer.execute(
                "INSERT INTO sessions (id, agent_id, created_at, updated_at, metadata)"
                " VALUES (?, ?, ?, ?, ?)",
                (session_id, self.agent_id, now, now, meta),
            )
        except sqlite3.IntegrityError as exc:
            await self._rollback()
            raise ConflictError(
                f"session_id: session {session_id!r} already exists",
                data={"field": "session_id"},
            ) from exc
        except sqlite3.Error as exc:
            await self._rollback()
            raise _storage_error(exc, "create_session") from exc
        await self._commit()
        return session_id

    async def get_session(self, session_id: str) -> dict[str, Any] | None:
        conn = await self._read_conn()
        async with conn.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
        ) as cur:
            row = await cur.fetchone()
        return None if row is None else _session_row(row)

    async def list_sessions(self) -> list[dict[str, Any]]:
        conn = await self._read_conn()
        rows = await conn.execute_fetchall(
            f"SELECT {_SESSION_COLUMNS} FROM sessions ORDER BY updated_at DESC, created_at DESC, id"
        )
        return [_session_row(r) for r in rows]

    async def delete_session(self, session_id: str) -> bool:
        await self._begin()
        try:
            cur = await self.writer.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
            deleted = cur.rowcount > 0
            for table in ("events", "tool_calls", "idempotency"):
                await self.writer.execute(
                    f"DELETE FROM {table} WHERE session_id = ?", (session_id,)
                )
        except sqlite3.Error as exc:
            await self._rollback()
            raise _storage_error(exc, "delete_session") from exc
        await self._commit()
        return deleted

    async def session_state(self, session_id: str) -> dict[str, Any] | None:
        """Internal columns of a session (last_seq, strategy, flags, mirror cursor)."""
        conn = await self._read_conn()
        async with conn.execute(
            "SELECT last_seq, last_turn, strategy, compaction_required, mirror_seq"
            " FROM sessions WHERE id = ?",
            (session_id,),
        ) as cur:
            row = await cur.fetchone()
        return None if row is None else dict(row)

    async def update_session_fields(self, session_id: str, **fields: Any) -> None:
        """Set internal columns (``strategy``, ``compaction_required``, ``mirror_seq``)."""
        allowed = {"strategy", "compaction_required", "mirror_seq"}
        bad = set(fields) - allowed
        if bad:
            raise InvalidParamsError(f"unknown session fields: {sorted(bad)}")
        sets = ", ".join(f"{k} = ?" for k in fields)
        await self._begin()
        try:
            cur = await self.writer.execute(
                f"UPDATE sessions SET {sets} WHERE id = ?", (*fields.values(), session_id)
            )
            if cur.rowcount == 0:
                raise NotFoundError(f"session_id: session {session_id!r} not found")
        except sqlite3.Error as exc:
            await self._rollback()
            raise _storage_error(exc, "update session") from exc
        except BaseException:
            await self._rollback()
            raise
        await self._commit()

    # -- events --------------------------------------------------------------------

    async def append_events(
        self,
        session_id: str,
        events: Sequence[SessionEvent],
        token_counts: Sequence[int],
        *,
        expected_last_seq: int | None = None,
        idempotency_key: str | None = None,
        compaction_required: bool | None = None,
        mirror_seq: int | None = None,
    ) -> tuple[AppendResult, list[SessionEvent], bool]:
        """Append ``events`` in one transaction; all or nothing.

        ``mirror_seq``, when given, records the JSONL mirror cursor in the same transaction
        (the actor passes the cursor confirmed by the previous append, so the stored
        cursor lags by at most one append and a crash is always detected on activation).

        Returns the result, the stored events (with seq, turn, session_id filled in), and
        whether it was a replay of an earlier call with the same idempotency key (then
        nothing was written and the stored events list is empty).
        """
        await self._begin()
        try:
            out = await self._append_locked(
                session_id,
                events,
                token_counts,
                expected_last_seq,
                idempotency_key,
                compaction_required,
                mirror_seq,
            )
        except sqlite3.IntegrityError as exc:
            await self._rollback()
            raise ConflictError(
                f"events: an event id already exists in this agent ({exc})",
                data={"field": "events[].id"},
            ) from exc
        except sqlite3.Error as exc:
            await self._rollback()
            raise _storage_error(exc, "append_events") from exc
        except BaseException:
            await self._rollback()
            raise
        await self._commit()
        return out

    async def _append_locked(
        self,
        session_id: str,
        events: Sequence[SessionEvent],
        token_counts: Sequence[int],
        expected_last_seq: int | None,
        idempotency_key: str | None,
        compaction_required: bool | None,
        mirror_seq: int | None,
    ) -> tuple[AppendResult, list[SessionEvent], bool]:
        w = self.writer
        async with w.execute(
            "SELECT last_seq, last_turn, last_turn_start_seq, compaction_required"
            " FROM sessions WHERE id = ?",
            (session_id,),
        ) as cur:
            row = await cur.fetchone()
        if row is None:
            raise NotFoundError(
                f"session_id: session {session_id!r} not found", data={"field": "session_id"}
            )
        last_seq, turn, turn_start = int(row[0]), int(row[1]), int(row[2])
        if idempotency_key is not None:
            async with w.execute(
                "SELECT result FROM idempotency WHERE session_id = ? AND key = ?",
                (session_id, idempotency_key),
            ) as cur:
                prev = await cur.fetchone()
            if prev is not None:
                return msgspec.json.decode(prev[0], type=AppendResult), [], True
        if expected_last_seq is not None and expected_last_seq != last_seq:
            raise ConflictError(
                f"expected_last_seq: session {session_id!r} is at seq {last_seq}, "
                f"not {expected_last_seq}",
                data={"last_seq": last_seq, "field": "expected_last_seq"},
            )
        # Tool results join the turn of their call, even when the call came in an earlier append.
        wanted = [e.tool_call_id for e in events if e.action == "tool_result" and e.tool_call_id]
        known: dict[str, tuple[int, int]] = {}
        if wanted:
            marks = ",".join("?" * len(wanted))
            rows = await w.execute_fetchall(
                f"SELECT call_id, turn, turn_start_seq FROM tool_calls"
                f" WHERE session_id = ? AND call_id IN ({marks})",
                (session_id, *wanted),
            )
            known = {r[0]: (int(r[1]), int(r[2])) for r in rows}
        now = now_ms()
        stored: list[SessionEvent] = []
        rows_out: list[tuple[Any, ...]] = []
        calls_out: list[tuple[Any, ...]] = []
        seq = last_seq
        for ev, tokens in zip(events, token_counts, strict=True):
            seq += 1
            if ev.action == "user_message":
                turn, turn_start = turn + 1, seq
                ev_turn, ev_start = turn, turn_start
            elif ev.action == "tool_result" and ev.tool_call_id in known:
                ev_turn, ev_start = known[ev.tool_call_id]
            else:
                ev_turn, ev_start = turn, turn_start
            new = msgspec.structs.replace(
                ev,
                session_id=session_id,
                seq=seq,
                timestamp=ev.timestamp or now,
                turn=ev_turn,
                token_count=tokens,
            )
            if ev.action == "tool_call_request":
                for call in ev.tool_calls or ():
                    known[call.id] = (ev_turn, ev_start)
                    calls_out.append((session_id, call.id, ev_turn, ev_start))
            row_d = dehydrate_event(new)
            rows_out.append(
                (
                    row_d["id"],
                    session_id,
                    seq,
                    row_d["action"],
                    row_d["content"],
                    row_d["metadata"],
                    row_d["created_at"],
                    ev_turn,
                    ev_start,
                    tokens,
                )
            )
            stored.append(new)
        if rows_out:
            await w.executemany(
                f"INSERT INTO events ({_EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows_out,
            )
        if calls_out:
            await w.executemany(
                "INSERT OR IGNORE INTO tool_calls (session_id, call_id, turn, turn_start_seq)"
                " VALUES (?, ?, ?, ?)",
                calls_out,
            )
        flag = bool(row[3]) if compaction_required is None else compaction_required
        if rows_out or compaction_required is not None:
            await w.execute(
                "UPDATE sessions SET last_seq = ?, last_turn = ?, last_turn_start_seq = ?,"
                " updated_at = ?, compaction_required = ?, mirror_seq = COALESCE(?, mirror_seq)"
                " WHERE id = ?",
                (seq, turn, turn_start, now, int(flag), mirror_seq, session_id),
            )
        result = AppendResult(
            seqs=list(range(last_seq + 1, seq + 1)), last_seq=seq, compaction_required=flag
        )
        if idempotency_key is not None:
            await w.execute(
                "INSERT INTO idempotency (session_id, key, result, created_at) VALUES (?, ?, ?, ?)",
                (session_id, idempotency_key, encode_json(result), now),
            )
        return result, stored, False

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
                return []
            where.append(f"action IN ({','.join('?' * len(acts))})")
            args.extend(acts)
        order = "DESC" if tail else "ASC"
        sql = (
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE {' AND '.join(where)} ORDER BY seq {order}"
        )
        if limit is not None:
            sql += " LIMIT ?"
            args.append(max(0, int(limit)))
        conn = await self._read_conn()
        rows = await conn.execute_fetchall(sql, args)
        events = [hydrate_event(dict(r)) for r in rows]
        if tail:
            events.reverse()
        return events

    async def delete_events(self, session_id: str, event_ids: Sequence[str]) -> int:
        if not event_ids:
            return 0
        await self._begin()
        try:
            marks = ",".join("?" * len(event_ids))
            cur = await self.writer.execute(
                f"DELETE FROM events WHERE session_id = ? AND id IN ({marks})",
                (session_id, *event_ids),
            )
            count = cur.rowcount
        except sqlite3.Error as exc:
            await self._rollback()
            raise _storage_error(exc, "delete_events") from exc
        await self._commit()
        return count

    async def latest_compaction(self, session_id: str) -> SessionEvent | None:
        conn = await self._read_conn()
        async with conn.execute(
            f"SELECT {_EVENT_COLUMNS} FROM events WHERE session_id = ? AND action = 'compaction'"
            " ORDER BY seq DESC LIMIT 1",
            (session_id,),
        ) as cur:
            row = await cur.fetchone()
        return None if row is None else hydrate_event(dict(row))

    async def context_window(
        self, session_id: str, *, limit: int | None, from_seq: int | None = None
    ) -> ContextWindow:
        """A tool-pair-safe window for a working context, read in one snapshot.

        With ``from_seq``, the events from that seq on (at most the last ``limit``);
        otherwise the last ``limit`` events, moved to the nearest turn boundary when the
        cut would split a tool call from its results. Results whose call lies before the
        window are dropped from it (they stay stored).
        """
        conn = await self._read_conn()
        async with self._read_lock:
            await conn.execute("BEGIN")
            try:
                async with conn.execute(
                    "SELECT last_seq, compaction_required, strategy FROM sessions WHERE id = ?",
                    (session_id,),
                ) as cur:
                    srow = await cur.fetchone()
                if srow is None:
                    raise NotFoundError(
                        f"session_id: session {session_id!r} not found",
                        data={"field": "session_id"},
                    )
                where = "session_id = ?"
                args: list[Any] = [session_id]
                if from_seq is not None:
                    where += " AND seq >= ?"
                    args.append(from_seq)
                sql = f"SELECT {_EVENT_COLUMNS} FROM events WHERE {where} ORDER BY seq DESC"
                if limit is not None:
                    sql += " LIMIT ?"
                    args.append(max(0, int(limit)))
                rows = list(await conn.execute_fetchall(sql, args))
                rows.reverse()
                prefix: list[sqlite3.Row] = []
                if rows and limit is not None and len(rows) >= limit:
                    first = rows[0]
                    # Widen to the turn of the first event and of any result whose call is older.
                    start = min(
                        int(r["turn_start_seq"])
                        for r in rows
                        if r is first or r["action"] == "tool_result"
                    )
                    lower = start if from_seq is None else max(start, from_seq)
                    if lower < int(first["seq"]):
                        prefix = list(
                            await conn.execute_fetchall(
                                f"SELECT {_EVENT_COLUMNS} FROM events WHERE session_id = ?"
                                " AND seq >= ? AND seq < ? ORDER BY seq",
                                (session_id, lower, int(first["seq"])),
                            )
                        )
            finally:
                await conn.execute("COMMIT")
        events = [hydrate_event(dict(r)) for r in (*prefix, *rows)]
        start_index = safe_window_start(events, len(prefix)) if prefix else 0
        strategy = None if srow["strategy"] is None else _DECODER.decode(srow["strategy"])
        return ContextWindow(
            events=drop_orphan_results(events[start_index:]),
            last_seq=int(srow["last_seq"]),
            compaction_required=bool(srow["compaction_required"]),
            strategy=strategy,
        )

    async def all_events(self, session_id: str) -> list[SessionEvent]:
        return await self.load_events(session_id, limit=None, tail=False)

    async def get_setting(self, key: str) -> str | None:
        conn = await self._read_conn()
        async with conn.execute("SELECT value FROM agent_settings WHERE key = ?", (key,)) as cur:
            row = await cur.fetchone()
        return None if row is None else str(row[0])

    async def set_setting(self, key: str, value: str) -> None:
        await self._begin()
        try:
            await self.writer.execute(
                "INSERT INTO agent_settings (key, value) VALUES (?, ?)"
                " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, value),
            )
        except sqlite3.Error as exc:
            await self._rollback()
            raise _storage_error(exc, "set_setting") from exc
        await self._commit()
