"""The recall index's SQL (I/O bodies run by ``AgentStore``): the search, the backfill of
a migrated file in bounded steps, and the reset of ``reindex``.

The index is split into shards (``recall_shards``: FTS5 tables ``events_fts_<n>``), each
holding one row per indexed event of a rowid range, its rowid the event's; triggers keep
them in step with ``events`` (``recall_pending``). ``agent_settings['recall_backfill']`` is
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
from ..values.recall_pacing import STEP_CHARS
from ..values.recall_shards import Shard
from ..values.records import CompactionRecord
from .lineage_sql import SearchScope, events_source, search_scope
from .recall_levels import fts5_tables, make_openable
from .recall_shards import drop_all, index_rows, list_shards, shard_table
from .stored_rows import EVENT_COLUMNS, SKIPPED_RECORDS, hydrate_or_skip

__all__ = [
    "BACKFILL_KEY",
    "RecallFilter",
    "backfill_pending",
    "backfill_step",
    "is_recall_object",
    "rebuild_objects",
    "reset_index",
    "search",
]

BACKFILL_KEY: Final = "recall_backfill"
PURGE_KEY: Final = "recall_purge"
"""Set by files of schema 8 after a delete (its single index merged later); gone in 9."""
SNIPPET_TOKENS: Final = 24


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
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'events_fts_shards'"
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
    return (
        conn.execute(
            "SELECT 1 FROM recall_pending UNION ALL SELECT 1 FROM events_fts_gone LIMIT 1"
        ).fetchone()
        is not None
    )


def backfill_pending(conn: sqlite3.Connection) -> bool:
    """Whether some stored events are not indexed yet (or the file has no index): a
    backfill to run, or events a plain SQLite client wrote (queued, indexed by the
    store's next write)."""
    return not _has_index(conn) or _backfill(conn) is not None or _queued(conn)


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
    # Replaced when indexed already: an event written after the migration may reuse the
    # rowid of one deleted before it, and its trigger indexed it.
    index_rows(conn, [(rowid, text) for rowid, text in texts if text is not None])
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
    drop_all(conn)
    conn.execute("DELETE FROM events_fts_gone")
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
    src, pre = events_source(conn, session_id)
    row = conn.execute(
        f"SELECT {EVENT_COLUMNS} FROM {src} WHERE session_id = ?"
        " AND action = 'compaction' ORDER BY seq DESC LIMIT 1",
        (*pre, session_id),
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


def _filters(
    conn: sqlite3.Connection, query: RecallFilter
) -> tuple[str, list[Any], SearchScope] | None:
    """The SQL condition on the event ``e`` (and its arguments) a hit must meet beside
    its match, and the scope that says under which sessions a hit is reported (a fork
    reads its parents' rows: ``lineage_sql.search_scope``); ``None``: nothing can (an
    empty set of sessions). The one place that says which events a search covers."""
    if query.sessions is not None and not query.sessions:
        return None
    args: list[Any] = []
    scope = search_scope(conn, query.sessions)
    where = scope.where(args)
    if query.after_seq is not None:
        where += " AND e.seq > ?"
        args.append(query.after_seq)
    if query.before_seq is not None:
        where += " AND e.seq < ?"
        args.append(query.before_seq)
    if query.actions:
        where += _in("e.action", query.actions, args)
    return where, args, scope


def _shards_for(conn: sqlite3.Connection, query: RecallFilter) -> list[Shard]:
    """The shards that may hold a hit. A search limited to sessions reads only the shards
    whose rowid range meets the rowids of those sessions' events (found on the
    ``(session_id, seq)`` index, which holds each event's rowid): a session's search
    does not pay for every shard of the agent."""
    shards = list_shards(conn)  # newest range first
    if query.sessions is None or len(shards) < 2:
        return shards
    # the sessions and seqs only: they are on the index (an action is not)
    on_index = _filters(conn, msgspec.structs.replace(query, actions=None))
    assert on_index is not None  # the sessions are not empty: ``search`` checked
    low, high = conn.execute(
        f"SELECT min(e.rowid), max(e.rowid) FROM events AS e WHERE 1{on_index[0]}",
        on_index[1],
    ).fetchone()
    if low is None:
        return []
    out: list[Shard] = []
    upper: int | None = None  # the range of a shard ends where the next one's starts
    for shard in shards:
        if shard.first_rowid <= high and (upper is None or upper > low):
            out.append(shard)
        upper = shard.first_rowid
    return out


def _best(
    conn: sqlite3.Connection, query: RecallFilter, where: str, args: list[Any]
) -> list[tuple[float, int, int]]:
    """The best ``query.limit`` matches over every shard: ``(bm25, shard, rowid)``, best
    (lowest) first. Each shard ranks its own matches (bm25 with the shard's statistics);
    only the best ``limit`` of each are kept to merge."""
    found: list[tuple[float, int, int]] = []
    for shard in _shards_for(conn, query):
        table = shard_table(shard.shard)
        rows = conn.execute(
            f"SELECT bm25({table}) AS score, {table}.rowid FROM {table}"
            f" JOIN events AS e ON e.rowid = {table}.rowid"
            f" WHERE {table} MATCH ?{where} ORDER BY score LIMIT ?",
            [query.expr, *args, query.limit],
        ).fetchall()
        found.extend((float(score), shard.shard, int(rowid)) for score, rowid in rows)
    found.sort()
    return found[: query.limit]


def search(conn: sqlite3.Connection, query: RecallFilter) -> tuple[list[dict[str, Any]], bool]:
    """The best ``query.limit`` hits (bm25, best first) and whether the index is still
    being built, read in one snapshot."""
    conn.execute("BEGIN")
    try:
        if not _has_index(conn):  # a read-only open of a file not migrated yet
            return [], True
        indexing = _backfill(conn) is not None or _queued(conn)
        filters = _filters(conn, query)
        if filters is None:
            return [], indexing
        where, args, scope = filters
        found: list[tuple[str, int, str, str, Any, Any, float]] = []
        for score, shard, rowid in _best(conn, query, where, args):
            table = shard_table(shard)
            row = conn.execute(
                "SELECT e.session_id, e.seq, e.id, e.action, e.metadata,"
                f" snippet({table}, 0, '{SNIPPET_OPEN}', '{SNIPPET_CLOSE}', '…',"
                f" {SNIPPET_TOKENS}) FROM {table} JOIN events AS e ON e.rowid = {table}.rowid"
                f" WHERE {table} MATCH ? AND {table}.rowid = ?",
                (query.expr, rowid),
            ).fetchone()
            if row is None:
                continue
            owner, seq, event_id, action, metadata, snippet = row
            found.extend(
                (session_id, seq, event_id, action, metadata, snippet, score)
                for session_id in scope.report_as(owner, seq)
            )
        records: dict[str, CompactionRecord | None] = {}
        hits: list[dict[str, Any]] = []
        for session_id, seq, event_id, action, metadata, snippet, score in found[: query.limit]:
            if session_id not in records:
                records[session_id] = _latest_record(conn, session_id)
            hits.append(
                {
                    "session_id": session_id,
                    "seq": seq,
                    "event_id": event_id,
                    "action": action,
                    "snippet": unsegment(str(snippet or "")),
                    "score": round(-score, 6),
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
        for table in fts5_tables(conn):  # an index FTS5 reads as corrupt cannot be dropped
            make_openable(conn, table)
        objects = conn.execute(
            "SELECT type, name, sql FROM main.sqlite_master WHERE name LIKE 'events_fts%'"
        ).fetchall()
        for kind, name, _ in objects:
            if kind == "trigger":
                conn.execute(f'DROP TRIGGER IF EXISTS "{name}"')
        for kind, name, sql in objects:  # the virtual tables first: they drop their own
            if kind == "table" and str(sql or "").upper().startswith("CREATE VIRTUAL"):
                conn.execute(f'DROP TABLE IF EXISTS "{name}"')
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
