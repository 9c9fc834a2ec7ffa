"""Synchronous SQLite operations of one agent file, one function per transaction (I/O).

Each function here runs start to finish on a worker thread (see ``store``): a write is one
``BEGIN IMMEDIATE`` ... ``COMMIT`` with every statement inside, so a turn costs one thread
hop instead of one per statement. Connections are in autocommit mode
(``isolation_level=None``); the functions manage transactions explicitly and roll back on
any failure, so a refused or failed write leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

from ..core.codec import dehydrate_event, encode_json, hydrate_event, now_ms
from ..core.errors import (
    AgentUnavailableError,
    ConflictError,
    CorruptRecordError,
    NotFoundError,
    SessionServerError,
    StorageError,
)
from ..core.events import SessionEvent
from ..core.plans import AppendBatch, AppendOutcome, AppendResult, SessionState
from ..core.tokens import count_events
from ..core.turns import TurnPosition, number_turns
from .file_modes import create_file
from .schema import SCHEMA_VERSION, schema_sql

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_RETENTION",
    "EVENT_COLUMNS",
    "PRUNE_EVERY_SEQS",
    "SESSION_STATE_COLUMNS",
    "SKIPPED_RECORDS",
    "STALE_MIRROR_SEQ",
    "AppendResult",
    "IdempotencyRetention",
    "SkippedRecords",
    "append",
    "append_group",
    "connect",
    "hydrate_or_skip",
    "insert_session",
    "invalidate_mirror",
    "migrate",
    "prune_idempotency",
    "read_session_state",
    "request_digest",
    "rows_to_events",
    "session_row",
    "session_state",
    "storage_error",
    "write_txn",
]

EVENT_COLUMNS: Final = (
    "id, session_id, seq, action, content, metadata, created_at, turn, turn_start_seq, token_count"
)
_DECODER: Final = msgspec.json.Decoder()


def storage_error(exc: sqlite3.Error, what: str) -> StorageError:
    """A ``StorageError`` saying what failed; a full disk is named as such."""
    full = getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(
        exc
    )
    if full:
        return StorageError(
            f"{what} failed: the disk is full ({exc}); nothing was written",
            data={"reason": "disk_full", "sqlite_error": str(exc)},
        )
    return StorageError(f"{what} failed: {exc}", data={"sqlite_error": str(exc)})


def connect(
    path: Path, *, synchronous: str, busy_timeout_ms: int, readonly: bool
) -> sqlite3.Connection:
    """Open ``path`` in WAL mode with the given durability; fails on a non-SQLite file."""
    # check_same_thread=False: the store hands the connection to pool threads, one call at
    # a time (its locks guarantee that), never concurrently.
    # A reader opens the file read-only (``mode=ro``): it never creates a missing file,
    # and takes no lock a writer in another process would wait for (WAL readers share).
    target = f"{Path(path).resolve().as_uri()}?mode=ro" if readonly else str(path)
    if not readonly:
        create_file(Path(path))  # SQLite gives its -wal and -shm files the file's mode
    conn = sqlite3.connect(target, isolation_level=None, check_same_thread=False, uri=readonly)
    try:
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        conn.execute("PRAGMA journal_mode=WAL")  # any read fails here on a non-SQLite file
        conn.execute(f"PRAGMA synchronous={synchronous}")
        if readonly:
            conn.execute("PRAGMA query_only=1")
        else:
            # Deleted rows are overwritten with zeros, not just unlinked (DESIGN erasure):
            # with a checkpoint after each delete, no deleted text survives in the files.
            conn.execute("PRAGMA secure_delete=ON")
    except BaseException:
        conn.close()
        raise
    return conn


def _statements(script: str) -> list[str]:
    """Split a DDL script into statements (``executescript`` would commit implicitly)."""
    out: list[str] = []
    buf = ""
    for line in script.splitlines(keepends=True):
        if not buf and line.strip().startswith("--"):
            continue
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    return [s for s in out if s]


# MIGRATIONS[n] upgrades a file at user_version n to n + 1. Version 0 means "empty file":
# it gets the whole current schema at once, so this only grows for later versions.
MIGRATIONS: dict[int, Sequence[str]] = {
    # 1 -> 2: the mirror checkpoint and the snapshot binding. A migrated file has neither:
    # its snapshot is not trusted and its mirror is verified (streamed) once on activation.
    1: (
        "ALTER TABLE sessions ADD COLUMN mirror_state TEXT",
        "ALTER TABLE sessions ADD COLUMN mirror_files TEXT",
        "ALTER TABLE sessions ADD COLUMN snapshot_seq INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE sessions ADD COLUMN snapshot_digest TEXT",
    ),
}

# A delete writes this mirror cursor in its own transaction: never a session's last seq,
# so the next activation repairs the mirror even if the process dies before it does.
STALE_MIRROR_SEQ: Final = -1


def invalidate_mirror(conn: sqlite3.Connection, session_id: str) -> None:
    """Inside a delete's transaction: the mirror is stale and no snapshot is trusted.

    The checkpoint and file sizes go too, so nothing written before the delete can pass
    for current after a crash.
    """
    conn.execute(
        "UPDATE sessions SET mirror_seq = ?, mirror_state = NULL, mirror_files = NULL,"
        " snapshot_seq = 0, snapshot_digest = NULL WHERE id = ?",
        (STALE_MIRROR_SEQ, session_id),
    )


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the database to ``SCHEMA_VERSION`` (new file: ``schema.sql``), atomically."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise AgentUnavailableError(
            f"database schema version {version} is newer than this program ({SCHEMA_VERSION})"
        )
    if version == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        if version == 0:
            for statement in _statements(schema_sql()):
                conn.execute(statement)
            version = SCHEMA_VERSION
        while version < SCHEMA_VERSION:
            for statement in MIGRATIONS[version]:
                conn.execute(statement)
            version += 1
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def write_txn(conn: sqlite3.Connection, what: str, body: Any, *args: Any) -> Any:
    """Run ``body(conn, *args)`` inside ``BEGIN IMMEDIATE`` ... ``COMMIT``.

    Any exception rolls back. SQLite errors become ``StorageError`` (a unique-constraint
    violation becomes ``ConflictError``); the project's own errors pass through.
    """
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        raise storage_error(exc, what) from exc
    try:
        result = body(conn, *args)
        conn.execute("COMMIT")
        return result
    except BaseException as exc:
        if conn.in_transaction:
            # SQLite may already have rolled back after a hard failure.
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        mapped = _project_error(exc, what)
        if mapped is not exc:
            raise mapped from exc
        raise


def _project_error(exc: BaseException, what: str) -> BaseException:
    """A SQLite error as the project's (a unique-constraint violation is a conflict);
    any other exception as it is."""
    if isinstance(exc, sqlite3.IntegrityError):
        return ConflictError(f"{what}: an id already exists ({exc})", data={"field": "id"})
    if isinstance(exc, sqlite3.Error):
        return storage_error(exc, what)
    return exc


def session_row(row: sqlite3.Row) -> dict[str, Any]:
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


def insert_session(
    conn: sqlite3.Connection, agent_id: str, session_id: str, metadata: dict[str, Any] | None
) -> None:
    """Insert a session row; ``ConflictError`` when the id exists."""
    if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone():
        raise ConflictError(
            f"session_id: session {session_id!r} already exists", data={"field": "session_id"}
        )
    now = now_ms()
    conn.execute(
        "INSERT INTO sessions (id, agent_id, created_at, updated_at, metadata)"
        " VALUES (?, ?, ?, ?, ?)",
        (session_id, agent_id, now, now, None if metadata is None else encode_json(metadata)),
    )


class SkippedRecords:
    """How many stored rows could not be read back (``CorruptRecordError``): each one is
    skipped and logged, so one bad row never makes a session unreadable."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def note(self, exc: CorruptRecordError) -> None:
        with self._lock:  # rows are read on worker threads
            self.count += 1
        log.warning("skipping an unreadable stored record: %s", exc.message)


SKIPPED_RECORDS: Final = SkippedRecords()


class IdempotencyRetention(msgspec.Struct, frozen=True):
    """How long the results of keyed writes are kept for replay.

    A key is kept while it is among the ``max_per_session`` newest of its session and
    younger than ``max_age_seconds``. Pruning runs in the write path, inside the keyed
    write's own transaction, each time a session's seq crosses a multiple of
    ``PRUNE_EVERY_SEQS`` (so a session holds at most ``max_per_session`` +
    ``PRUNE_EVERY_SEQS`` keys, and the cost is amortised over that many events). A retry
    after its key was pruned is a new write.
    """

    max_age_seconds: float = 86_400.0
    max_per_session: int = 1000

    def __post_init__(self) -> None:
        if not self.max_age_seconds > 0:
            raise ValueError(f"max_age_seconds: must be positive, got {self.max_age_seconds}")
        if self.max_per_session < 1:
            raise ValueError(f"max_per_session: must be at least 1, got {self.max_per_session}")


DEFAULT_RETENTION: Final = IdempotencyRetention()
PRUNE_EVERY_SEQS: Final = 64


def prune_idempotency(
    conn: sqlite3.Connection, session_id: str, now: int, retention: IdempotencyRetention
) -> int:
    """Drop the keys of ``session_id`` beyond ``retention`` (``now`` in ms); the count."""
    cursor = conn.execute(
        "DELETE FROM idempotency WHERE session_id = ?1 AND (created_at < ?2 OR key IN ("
        " SELECT key FROM idempotency WHERE session_id = ?1"
        " ORDER BY created_at DESC, key DESC LIMIT -1 OFFSET ?3))",
        (session_id, now - int(retention.max_age_seconds * 1000), retention.max_per_session),
    )
    return int(cursor.rowcount)


def hydrate_or_skip(row: sqlite3.Row) -> SessionEvent | None:
    """The event of ``row``, or ``None`` (logged and counted) when it cannot be read."""
    try:
        return hydrate_event(dict(row))
    except CorruptRecordError as exc:
        SKIPPED_RECORDS.note(exc)
        return None


def rows_to_events(rows: Sequence[sqlite3.Row]) -> list[SessionEvent]:
    """The events of ``rows``; rows that cannot be read are skipped (``SKIPPED_RECORDS``)."""
    events = []
    for row in rows:
        event = hydrate_or_skip(row)
        if event is not None:
            events.append(event)
    return events


SESSION_STATE_COLUMNS: Final = (
    "id, last_seq, last_turn, strategy, compaction_required, mirror_seq,"
    " snapshot_seq, snapshot_digest"
)


def session_state(row: sqlite3.Row | None) -> SessionState | None:
    """Hydrate a row of ``SESSION_STATE_COLUMNS`` (the strategy JSON decoded once)."""
    if row is None:
        return None
    raw = row["strategy"]
    try:
        strategy = None if raw is None else _DECODER.decode(raw)
    except msgspec.DecodeError as exc:
        raise CorruptRecordError(
            f"session {row['id']!r}: field 'strategy' is not valid JSON"
        ) from exc
    return SessionState(
        session_id=str(row["id"]),
        last_seq=int(row["last_seq"]),
        last_turn=int(row["last_turn"]),
        compaction_required=bool(row["compaction_required"]),
        mirror_seq=int(row["mirror_seq"]),
        strategy=strategy,
        snapshot_seq=int(row["snapshot_seq"]),
        snapshot_digest=row["snapshot_digest"],
    )


def read_session_state(conn: sqlite3.Connection, session_id: str) -> SessionState | None:
    return session_state(
        conn.execute(
            f"SELECT {SESSION_STATE_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
    )


def append(
    conn: sqlite3.Connection,
    batch: AppendBatch,
    retention: IdempotencyRetention = DEFAULT_RETENTION,
) -> AppendOutcome:
    """The body of an append transaction (run inside ``write_txn``).

    Returns the answer, the stored events (seq, turn, session_id filled in) and whether it
    was a replay of an earlier call with the same idempotency key (nothing written).
    ``batch.create`` first creates the session in the same transaction, so a new session
    appears with all its events or not at all (imports).
    """
    session_id = batch.session_id
    if batch.create is not None:
        insert_session(conn, batch.create.agent_id, session_id, batch.create.metadata)
    row = conn.execute(
        "SELECT last_seq, last_turn, last_turn_start_seq, compaction_required"
        " FROM sessions WHERE id = ?",
        (session_id,),
    ).fetchone()
    if row is None:
        raise NotFoundError.session(session_id)
    last_seq = int(row[0])
    last = TurnPosition(int(row[1]), int(row[2]))
    # Each event's row, once: its metadata is the digest's and the stored row's (the
    # fields the append sets, seq, turn and session, are not part of it).
    dehydrated = [dehydrate_event(e) for e in batch.events]
    events = batch.events
    now = now_ms()
    flag = bool(row[3]) if batch.compaction_required is None else batch.compaction_required
    seq = last_seq + len(events)
    result = AppendResult(
        seqs=list(range(last_seq + 1, seq + 1)), last_seq=seq, compaction_required=flag
    )
    key = batch.idempotency_key
    if key is not None:
        # The key's row first: it is written only when the key is new, so one statement
        # both claims the key and tells a replay (which then reads the first answer).
        # The request's digest is kept beside the result (same JSON column, so files
        # written before it existed read unchanged): a reuse of the key is a replay only
        # when the request is the same. Anything refused below rolls the row back.
        digest = _digest(dehydrated, batch.expected_last_seq)
        saved = {**msgspec.to_builtins(result), "digest": digest}
        claimed = conn.execute(
            "INSERT INTO idempotency (session_id, key, result, created_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (session_id, key) DO NOTHING",
            (session_id, key, encode_json(saved), now),
        ).rowcount
        if not claimed:
            prev = conn.execute(
                "SELECT result FROM idempotency WHERE session_id = ? AND key = ?",
                (session_id, key),
            ).fetchone()
            return AppendOutcome(_replay(prev[0], digest, session_id, key), [], replay=True)
    expected = batch.expected_last_seq
    if expected is not None and expected != last_seq:
        raise ConflictError(
            f"expected_last_seq: session {session_id!r} is at seq {last_seq}, not {expected}",
            data={"last_seq": last_seq, "field": "expected_last_seq"},
        )
    # Tool results join the turn of their call, even when the call came in an earlier
    # append: only results with no call before them in this batch need the stored calls.
    wanted: list[str] = []
    called: set[str] = set()
    for e in events:
        if e.action == "tool_call_request":
            called.update(c.id for c in e.tool_calls or ())
        elif e.action == "tool_result" and e.tool_call_id and e.tool_call_id not in called:
            wanted.append(e.tool_call_id)
    known: dict[str, TurnPosition] = {}
    if wanted:
        marks = ",".join("?" * len(wanted))
        for r in conn.execute(
            f"SELECT call_id, turn, turn_start_seq FROM tool_calls"
            f" WHERE session_id = ? AND call_id IN ({marks})",
            (session_id, *wanted),
        ):
            known[r[0]] = TurnPosition(int(r[1]), int(r[2]))
    positions, added = number_turns(events, first_seq=last_seq + 1, last=last, calls=known)
    stored: list[SessionEvent] = []
    rows_out: list[tuple[Any, ...]] = []
    seq = last_seq
    counts = batch.token_counts
    if counts is None:  # counted here, off the event loop (tiktoken releases the GIL)
        counts = count_events(events)
    for ev, d, tokens, pos in zip(events, dehydrated, counts, positions, strict=True):
        seq += 1
        if ev.action == "user_message":
            last = pos
        created = ev.timestamp or now
        new = msgspec.structs.replace(
            ev, session_id=session_id, seq=seq, timestamp=created, turn=pos.turn,
            token_count=tokens,
        )  # fmt: skip
        rows_out.append(
            (ev.id, session_id, seq, d["action"], d["content"], d["metadata"], created,
             pos.turn, pos.start_seq, tokens)
        )  # fmt: skip
        stored.append(new)
    if rows_out:
        try:
            conn.executemany(
                f"INSERT INTO events ({EVENT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows_out,
            )
        except sqlite3.IntegrityError as exc:
            raise ConflictError(
                f"events: an event id already exists in this agent ({exc})",
                data={"field": "events[].id", "last_seq": last_seq},
            ) from exc
    if added:
        # A reused id points at its latest call, as ``number_turns`` says: later results
        # join the latest call's turn.
        conn.executemany(
            "INSERT INTO tool_calls (session_id, call_id, turn, turn_start_seq)"
            " VALUES (?, ?, ?, ?) ON CONFLICT(session_id, call_id) DO UPDATE SET"
            " turn = excluded.turn, turn_start_seq = excluded.turn_start_seq",
            [(session_id, cid, p.turn, p.start_seq) for cid, p in added.items()],
        )
    if rows_out or batch.compaction_required is not None:
        conn.execute(
            "UPDATE sessions SET last_seq = ?, last_turn = ?, last_turn_start_seq = ?,"
            " updated_at = ?, compaction_required = ?, mirror_seq = COALESCE(?, mirror_seq)"
            " WHERE id = ?",
            (seq, last.turn, last.start_seq, now, int(flag), batch.mirror_seq, session_id),
        )
    if key is not None and seq // PRUNE_EVERY_SEQS != last_seq // PRUNE_EVERY_SEQS:
        prune_idempotency(conn, session_id, now, retention)
    return AppendOutcome(result, stored)


def request_digest(events: Sequence[SessionEvent], expected_last_seq: int | None) -> str:
    """A digest of what a write asks for: each event's action, content and metadata (as
    stored) and the expected seq. Ids and timestamps are left out: a client retrying a
    persist does not resend them, the server makes fresh ones."""
    return _digest([dehydrate_event(e) for e in events], expected_last_seq)


def _digest(rows: Sequence[dict[str, Any]], expected_last_seq: int | None) -> str:
    body = [expected_last_seq, [[r["action"], r["content"], r["metadata"]] for r in rows]]
    return hashlib.sha256(encode_json(body).encode("utf-8")).hexdigest()


def _replay(raw: str | bytes, digest: str | None, session_id: str, key: str) -> AppendResult:
    """The stored result of an earlier write with ``key``, if it asked for the same thing."""
    saved = msgspec.json.decode(raw)
    stored_digest = saved.get("digest") if isinstance(saved, dict) else None
    if stored_digest is not None and stored_digest != digest:
        raise ConflictError(
            f"idempotency_key: {key!r} was already used in session {session_id!r} for a "
            "different request (a retry must send the same content)",
            data={"reason": "idempotency_mismatch", "field": "idempotency_key"},
        )
    return msgspec.convert(saved, AppendResult)


def append_group(
    conn: sqlite3.Connection,
    batches: Sequence[AppendBatch],
    retention: IdempotencyRetention = DEFAULT_RETENTION,
) -> list[AppendOutcome | SessionServerError]:
    """The body of a group commit (run inside ``write_txn``): each batch in order, in its
    own savepoint, so a refused batch (conflict, unknown session, an id that exists)
    rolls back alone and the others commit with the seqs they would have had one after
    the other. A refused batch's error is returned in its place.

    When SQLite gave up the whole transaction (a hard I/O failure), the error is raised:
    nothing of the group is written and every caller gets it.
    """
    out: list[AppendOutcome | SessionServerError] = []
    for batch in batches:
        conn.execute("SAVEPOINT batch")
        try:
            outcome = append(conn, batch, retention)
        except Exception as exc:
            mapped = _project_error(exc, "append_events")
            if not conn.in_transaction or not isinstance(mapped, SessionServerError):
                raise
            conn.execute("ROLLBACK TO batch")
            conn.execute("RELEASE batch")
            out.append(mapped)
            continue
        conn.execute("RELEASE batch")
        out.append(outcome)
    return out
