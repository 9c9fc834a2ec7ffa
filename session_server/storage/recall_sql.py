"""The recall index's SQL (I/O bodies run by ``AgentStore``): the search, the backfill of
a migrated file in bounded steps, the reset of ``reindex``, and the purge after deletes.

``events_fts`` (``schema.sql``) holds one row per indexed event, its rowid the event's;
triggers keep it in step with ``events``. ``agent_settings['recall_backfill']`` is
``{"next": rowid, "end": rowid}``: the events with ``next < rowid <= end`` that a step
has yet to index (absent: nothing left). A step indexes at most ``rows`` of them and
moves ``next`` in the same transaction, so a crash at any point leaves index, events
and progress agreeing.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from ..values.errors import CorruptRecordError
from ..values.recall import (
    SNIPPET_CLOSE,
    SNIPPET_OPEN,
    event_in_context,
    indexed_text,
    unsegment,
)
from ..values.records import CompactionRecord
from .recall_levels import make_openable, needs_rebuild
from .stored_rows import EVENT_COLUMNS, SKIPPED_RECORDS, hydrate_or_skip

__all__ = [
    "BACKFILL_KEY",
    "RecallFilter",
    "backfill_pending",
    "backfill_step",
    "is_recall_object",
    "purge",
    "purge_pending",
    "rebuild_objects",
    "reset_index",
    "search",
]

BACKFILL_KEY: Final = "recall_backfill"
PURGE_KEY: Final = "recall_purge"
SNIPPET_TOKENS: Final = 24
STEP_CHARS: Final = 256 * 1024
"""Text one backfill step indexes at most (beside its row bound)."""


class RecallFilter(msgspec.Struct, frozen=True):
    """What a search looks for: the FTS5 expression (``values.recall.fts_query``) and the
    filters. ``sessions``: only these sessions (``None``: every one)."""

    expr: str
    limit: int
    sessions: tuple[str, ...] | None = None
    after_seq: int | None = None
    before_seq: int | None = None
    actions: tuple[str, ...] | None = None


def _has_index(conn: sqlite3.Connection) -> bool:
    return (
        conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'events_fts'"
        ).fetchone()
        is not None
    )


def _backfill(conn: sqlite3.Connection) -> tuple[int, int] | None:
    row = conn.execute("SELECT value FROM agent_settings WHERE key = ?", (BACKFILL_KEY,)).fetchone()
    if row is None:
        return None
    try:
        state = msgspec.json.decode(str(row[0]))
        return int(state["next"]), int(state["end"])
    except (msgspec.DecodeError, KeyError, TypeError, ValueError):
        return 0, _max_rowid(conn)


def _max_rowid(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT coalesce(max(rowid), 0) FROM events").fetchone()[0])


def _queued(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM recall_pending LIMIT 1").fetchone() is not None


def backfill_pending(conn: sqlite3.Connection) -> bool:
    """Whether some stored events are not indexed yet (or the file has no index): a
    backfill to run, or events a plain SQLite client wrote (queued, indexed by the
    store's next write)."""
    return not _has_index(conn) or _backfill(conn) is not None or _queued(conn)


def purge_pending(conn: sqlite3.Connection) -> bool:
    """Whether a delete left old postings in the index (``purge`` not run since)."""
    row = conn.execute("SELECT 1 FROM agent_settings WHERE key = ?", (PURGE_KEY,)).fetchone()
    return row is not None


def purge(conn: sqlite3.Connection) -> bool:
    """After deletes (the body of one write transaction): merge the index's segments, so
    no posting of a deleted event's text is left (FTS5 only marks deleted rows until its
    segments merge; ``secure_delete`` then zeroes the freed pages). True when it ran.

    An index whose structure grew too many levels is rebuilt from its content instead:
    the FTS5 of SQLite 3.40 adds two levels with each ``'optimize'`` and reads more than
    2000 as a corrupt index (``recall_levels``)."""
    if not purge_pending(conn):
        return False
    command = "rebuild" if needs_rebuild(conn) else "optimize"
    conn.execute(f"INSERT INTO events_fts(events_fts) VALUES ('{command}')")
    conn.execute("DELETE FROM agent_settings WHERE key = ?", (PURGE_KEY,))
    return True


def backfill_step(conn: sqlite3.Connection, rows: int) -> int:
    """Index up to ``rows`` of the events still to index, and at most about
    ``STEP_CHARS`` of text (the body of one write transaction); returns how many were
    indexed, 0 when the backfill is complete (nothing is left)."""
    state = _backfill(conn)
    if state is None:
        return 0
    start, end = state
    batch = conn.execute(
        "SELECT rowid, action, content, metadata FROM events"
        " WHERE rowid > ? AND rowid <= ? ORDER BY rowid LIMIT ?",
        (start, end, rows),
    ).fetchall()
    texts: list[tuple[int, str | None]] = []
    chars = 0
    for r in batch:  # at most ``STEP_CHARS`` of text per step: one step stays short
        text = indexed_text(r[1], r[2], r[3])
        texts.append((r[0], text))
        chars += len(text or "")
        if chars >= STEP_CHARS:
            break
    done = len(texts) == len(batch) and len(batch) < rows
    # OR REPLACE: an event written after the migration may reuse the rowid of one
    # deleted before it, and its trigger indexed it already.
    conn.executemany(
        "INSERT OR REPLACE INTO events_fts(rowid, text) VALUES (?, ?)",
        [(rowid, text) for rowid, text in texts if text is not None],
    )
    if done:
        conn.execute("DELETE FROM agent_settings WHERE key = ?", (BACKFILL_KEY,))
        return 0
    conn.execute(
        "UPDATE agent_settings SET value = ? WHERE key = ?",
        (msgspec.json.encode({"next": texts[-1][0], "end": end}).decode(), BACKFILL_KEY),
    )
    return len(texts)


def reset_index(conn: sqlite3.Connection) -> int:
    """Empty the index and mark every stored event as still to index (``reindex``; the
    body of one write transaction). Returns the number of events to index."""
    conn.execute("DELETE FROM events_fts")
    conn.execute("DELETE FROM recall_pending")  # the backfill indexes every event
    end = _max_rowid(conn)
    count = int(conn.execute("SELECT count(*) FROM events").fetchone()[0])
    if count:
        conn.execute(
            "INSERT OR REPLACE INTO agent_settings(key, value) VALUES (?, ?)",
            (BACKFILL_KEY, msgspec.json.encode({"next": 0, "end": end}).decode()),
        )
    else:
        conn.execute("DELETE FROM agent_settings WHERE key = ?", (BACKFILL_KEY,))
    return count


def _latest_record(conn: sqlite3.Connection, session_id: str) -> CompactionRecord | None:
    row = conn.execute(
        f"SELECT {EVENT_COLUMNS} FROM events WHERE session_id = ?"
        " AND action = 'compaction' ORDER BY seq DESC LIMIT 1",
        (session_id,),
    ).fetchone()
    event = None if row is None else hydrate_or_skip(row)
    if event is None:
        return None
    try:
        return CompactionRecord.of(event)
    except CorruptRecordError as exc:  # the history reads as if uncompacted
        SKIPPED_RECORDS.note(exc)
        return None


def _tool_name(action: str, metadata: str | None) -> str | None:
    if not metadata or action not in ("tool_result", "tool_call_request"):
        return None
    try:
        meta = msgspec.json.decode(metadata)
    except msgspec.DecodeError:
        return None
    if not isinstance(meta, dict):
        return None
    if action == "tool_result":
        name = meta.get("toolName")
        return name if isinstance(name, str) else None
    calls = meta.get("toolCalls")
    if isinstance(calls, list) and calls and isinstance(calls[0], dict):
        name = calls[0].get("name")
        return name if isinstance(name, str) else None
    return None


def _in(column: str, values: Sequence[str], args: list[Any]) -> str:
    args.extend(values)
    return f" AND {column} IN ({', '.join('?' * len(values))})"


def search(conn: sqlite3.Connection, query: RecallFilter) -> tuple[list[dict[str, Any]], bool]:
    """The best ``query.limit`` hits (bm25, best first) and whether the index is still
    being built, read in one snapshot."""
    conn.execute("BEGIN")
    try:
        if not _has_index(conn):  # a read-only open of a file not migrated yet
            return [], True
        indexing = _backfill(conn) is not None or _queued(conn)
        where = "events_fts MATCH ?"
        args: list[Any] = [query.expr]
        if query.sessions is not None:
            if not query.sessions:
                return [], indexing
            where += _in("e.session_id", query.sessions, args)
        if query.after_seq is not None:
            where += " AND e.seq > ?"
            args.append(query.after_seq)
        if query.before_seq is not None:
            where += " AND e.seq < ?"
            args.append(query.before_seq)
        if query.actions:
            where += _in("e.action", query.actions, args)
        args.append(query.limit)
        rows = conn.execute(
            "SELECT e.session_id, e.seq, e.id, e.action, e.metadata,"
            f" snippet(events_fts, 0, '{SNIPPET_OPEN}', '{SNIPPET_CLOSE}', '…',"
            f" {SNIPPET_TOKENS}), bm25(events_fts) AS score"
            " FROM events_fts JOIN events AS e ON e.rowid = events_fts.rowid"
            f" WHERE {where} ORDER BY score LIMIT ?",
            args,
        ).fetchall()
        records: dict[str, CompactionRecord | None] = {}
        hits: list[dict[str, Any]] = []
        for session_id, seq, event_id, action, metadata, snippet, score in rows:
            if session_id not in records:
                records[session_id] = _latest_record(conn, session_id)
            hits.append(
                {
                    "session_id": session_id,
                    "seq": seq,
                    "event_id": event_id,
                    "action": action,
                    "snippet": unsegment(str(snippet or "")),
                    "score": round(-float(score), 6),
                    "in_context": event_in_context(
                        action,
                        seq,
                        records[session_id],
                        tool_name=_tool_name(action, metadata),
                    ),
                }
            )
        return hits, indexing
    finally:
        conn.execute("COMMIT")


def is_recall_object(kind: str, name: str) -> bool:
    """Whether the schema object ``kind`` ``name`` is one of the recall index's (its
    virtual table, shadow tables and triggers): ``rebuild_objects`` replaces them."""
    return kind in ("table", "trigger") and name.startswith("events_fts")


def rebuild_objects(conn: sqlite3.Connection, statements: Sequence[str]) -> None:
    """Replace whatever a staged file holds under the recall index's names by the
    objects of ``statements`` (``schema.sql``'s that create them), empty, every event to
    index again (one transaction). A restored or imported file's index is never trusted:
    its triggers could do anything, its rowids could have moved (``VACUUM``)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        make_openable(conn)  # an index FTS5 reads as corrupt cannot be dropped
        objects = conn.execute(
            "SELECT type, name FROM main.sqlite_master WHERE name LIKE 'events_fts%'"
        ).fetchall()
        for kind, name in objects:
            if kind == "trigger":
                conn.execute(f'DROP TRIGGER IF EXISTS "{name}"')
        conn.execute("DROP TABLE IF EXISTS events_fts")
        for kind, name in conn.execute(
            "SELECT type, name FROM main.sqlite_master WHERE name LIKE 'events_fts%'"
        ).fetchall():
            if kind == "table":
                conn.execute(f'DROP TABLE IF EXISTS "{name}"')
        for statement in statements:
            conn.execute(statement)
        conn.execute("DELETE FROM agent_settings WHERE key = ?", (PURGE_KEY,))
        reset_index(conn)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
