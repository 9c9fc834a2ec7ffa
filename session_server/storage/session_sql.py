"""Transaction bodies for session edits: metadata, filtered pages, pop, clear (I/O).

Each function runs on the agent's writer (or reader) connection inside one transaction
(``sqlite_ops.write_txn`` for writes), so each edit is atomic: all of it or nothing.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Mapping
from typing import Any, Final

from ..values.codec import dehydrate_event, encode_json, now_ms
from ..values.errors import ConflictError, InvalidParamsError, NotFoundError
from ..values.events import SessionEvent
from ..values.metadata_merge import merge_metadata
from . import sqlite_ops as ops
from .lineage_sql import (
    clear_session_rows,
    delete_from_view,
    events_source,
    private_row,
    shares_rows,
)
from .stored_rows import EVENT_COLUMNS, hydrate_or_skip, session_row

__all__ = ["clear_events", "list_sessions_page", "pop_event", "replace_metadata"]

_SESSION_COLUMNS: Final = (
    "id, agent_id, created_at, updated_at, metadata, last_seq, parent_session_id, fork_seq"
)


def replace_metadata(
    conn: sqlite3.Connection,
    session_id: str,
    metadata: Mapping[str, Any] | None,
    merge: bool = False,
) -> dict[str, Any]:
    """Replace a session's metadata (``None`` clears it), or with ``merge`` set only the
    keys of ``metadata`` (``values.metadata_merge``: read and written in this one
    transaction, so concurrent merges of different keys all stay); the updated row."""
    if merge and metadata is not None:
        row = conn.execute(
            f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        if row is None:
            raise NotFoundError.session(session_id)
        metadata = merge_metadata(session_row(row).get("metadata"), metadata)
    cur = conn.execute(
        "UPDATE sessions SET metadata = ?, updated_at = ? WHERE id = ?",
        (None if metadata is None else encode_json(dict(metadata)), now_ms(), session_id),
    )
    if cur.rowcount == 0:
        raise NotFoundError.session(session_id)
    row = conn.execute(
        f"SELECT {_SESSION_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
    ).fetchone()
    return session_row(row)


def _metadata_condition(key: str, value: Any) -> tuple[str, list[Any]]:
    """SQL matching ``metadata[key] == value`` exactly for a JSON scalar ``value``.

    The JSON path is a SQL string literal, not a parameter, so an index on the same
    expression serves the filter (SQLite matches index expressions by their text:
    ``idx_sessions_adk`` on ``json_extract(metadata, '$."adk_app"')``, ...). A string
    that does not start with ``[`` or ``{`` needs no ``json_type`` check: ``json_extract``
    answers numbers, booleans and null as non-text values, never equal to a text, and
    objects and arrays as their JSON text, which starts with one of those two."""
    path = '$."' + key.replace('"', '""') + '"'
    literal = "'" + path.replace("'", "''") + "'"
    extract = f"json_extract(metadata, {literal})"
    if value is None:
        return f"json_type(metadata, {literal}) = 'null'", []
    if isinstance(value, bool):
        return f"json_type(metadata, {literal}) = ?", ["true" if value else "false"]
    if isinstance(value, int):
        return f"(json_type(metadata, {literal}) = 'integer' AND {extract} = ?)", [value]
    if isinstance(value, float):
        return f"(json_type(metadata, {literal}) IN ('integer', 'real') AND {extract} = ?)", [value]
    if isinstance(value, str):
        if value.startswith(("[", "{")):
            return f"(json_type(metadata, {literal}) = 'text' AND {extract} = ?)", [value]
        return f"{extract} = ?", [value]
    raise InvalidParamsError(
        f"metadata.{key}: a filter value must be a string, number, boolean or null",
        data={"field": f"metadata.{key}"},
    )


def list_sessions_page(
    conn: sqlite3.Connection,
    *,
    metadata: Mapping[str, Any] | None,
    limit: int | None,
    offset: int,
    only: Collection[str] | None = None,
    after: tuple[int, int, str] | None = None,
    count: bool = True,
) -> tuple[list[dict[str, Any]], int | None]:
    """Sessions whose metadata has every key of ``metadata`` with that exact value (and
    whose id is in ``only``, when given), most recently updated first, from ``offset`` (at
    most ``limit``); and how many match (``None`` without ``count``: the count reads every
    matching row, the page only its own, in ``idx_sessions_updated`` order). ``after``
    (``updated_at, created_at, id`` of the last session of the previous page) starts after
    that session in the same order."""
    where: list[str] = []
    args: list[Any] = []
    if only is not None:
        ids = sorted(only)
        where.append(f"id IN ({','.join('?' * len(ids))})" if ids else "0")
        args.extend(ids)
    for key, value in (metadata or {}).items():
        sql, values = _metadata_condition(key, value)
        where.append(sql)
        args.extend(values)
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    total = (
        int(conn.execute(f"SELECT COUNT(*) FROM sessions{clause}", args).fetchone()[0])
        if count
        else None
    )
    if after is not None:
        # First: SQLite tests the terms in order, and this one needs no JSON parsed.
        where.insert(0, "(-updated_at, -created_at, id) > (?, ?, ?)")
        args[:0] = (-after[0], -after[1], after[2])
        clause = f" WHERE {' AND '.join(where)}"
    sql = (
        f"SELECT {_SESSION_COLUMNS} FROM sessions{clause}"
        " ORDER BY updated_at DESC, created_at DESC, id LIMIT ? OFFSET ?"
    )
    rows = conn.execute(sql, [*args, -1 if limit is None else limit, offset]).fetchall()
    return [session_row(r) for r in rows], total


def pop_event(
    conn: sqlite3.Connection,
    session_id: str,
    event_id: str | None,
    replacement: tuple[SessionEvent, int] | None,
) -> SessionEvent | None:
    """Remove the session's newest event that is not a compaction record, or rewrite it in
    place (same id, seq, timestamp and turn) with ``replacement`` (event, token count).

    ``event_id`` given: the newest such event must be that one, else ``ConflictError``
    (another writer changed the tail). Returns the event as it was (``None``: none).
    """
    if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
        raise NotFoundError.session(session_id)
    src, pre = events_source(conn, session_id)
    row = conn.execute(
        f"SELECT {EVENT_COLUMNS} FROM {src} WHERE session_id = ? AND action != 'compaction'"
        " ORDER BY seq DESC LIMIT 1",
        (*pre, session_id),
    ).fetchone()
    current = None if row is None else hydrate_or_skip(row)
    found = None if current is None else current.id
    if event_id is not None and found != event_id:
        raise ConflictError(
            f"event_id: the newest event of session {session_id!r} is {found!r}, not {event_id!r}",
            data={"field": "event_id", "event_id": found},
        )
    if current is None:
        return None
    if replacement is None:
        delete_from_view(conn, session_id, [current.id])  # kept for forks that read it
    else:
        target = current.id
        if src != "events" or shares_rows(conn, session_id):  # other sessions keep theirs
            target = private_row(conn, session_id, current.seq)
        event, tokens = replacement
        d = dehydrate_event(event)
        conn.execute(
            "UPDATE events SET action = ?, content = ?, metadata = ?, token_count = ? WHERE id = ?",
            (d["action"], d["content"], d["metadata"], tokens, target),
        )
    conn.execute("UPDATE sessions SET updated_at = ? WHERE id = ?", (now_ms(), session_id))
    ops.invalidate_mirror(conn, session_id)
    return current


def clear_events(conn: sqlite3.Connection, session_id: str) -> int:
    """Delete every event of a session (compaction records included), keep the session
    row (metadata, strategy, ``last_seq``: seqs are never reused); how many went."""
    if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
        raise NotFoundError.session(session_id)
    last_seq = int(conn.execute("SELECT last_seq FROM sessions WHERE id = ?", (session_id,))
                   .fetchone()[0])  # fmt: skip
    deleted = clear_session_rows(conn, session_id, last_seq)  # what forks read stays
    conn.execute("DELETE FROM tool_calls WHERE session_id = ?", (session_id,))
    conn.execute(
        "UPDATE sessions SET compaction_required = 0, updated_at = ? WHERE id = ?",
        (now_ms(), session_id),
    )
    ops.invalidate_mirror(conn, session_id)
    return int(deleted)
