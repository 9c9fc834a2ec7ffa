"""Read and write a whole session as its SQLite rows (I/O; see ``values.session_rows``)."""

from __future__ import annotations

import sqlite3
from typing import Any, Final

import msgspec

from ..values.errors import ConflictError
from ..values.session_rows import (
    EventRow,
    IdempotencyRow,
    SessionRow,
    SessionRows,
    ToolCallRow,
    columns,
)
from .lineage_sql import events_source

__all__ = ["read_session_rows", "write_session_rows"]

# The tool calls a session with lineage reads, as its events say (the latest call of a
# reused id wins, as ``values.turns.number_turns`` says): an export is self-contained.
_VIEW_CALLS: Final = (
    "SELECT call_id, turn, turn_start_seq FROM (SELECT json_extract(c.value, '$.id') AS call_id,"
    " e.turn AS turn, e.turn_start_seq AS turn_start_seq, ROW_NUMBER() OVER ("
    " PARTITION BY json_extract(c.value, '$.id') ORDER BY e.seq DESC) AS n"
    " FROM {src} AS e, json_each(e.metadata, '$.toolCalls') AS c"
    " WHERE e.session_id = ? AND e.action = 'tool_call_request' AND json_valid(e.metadata)"
    " AND json_type(c.value, '$.id') = 'text') WHERE n = 1 ORDER BY call_id"
)

_TABLES: Final[tuple[tuple[str, type[msgspec.Struct], str], ...]] = (
    ("events", EventRow, "seq"),
    ("tool_calls", ToolCallRow, "call_id"),
    ("idempotency", IdempotencyRow, "key"),
)


def read_session_rows(conn: sqlite3.Connection, session_id: str) -> SessionRows | None:
    """Every row of the session in one read snapshot, or ``None`` when it does not exist."""
    conn.execute("BEGIN")
    try:
        row = conn.execute(
            f"SELECT {', '.join(columns(SessionRow))} FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
        if row is None:
            return None
        parts: dict[str, list[Any]] = {}
        src, pre = events_source(conn, session_id)  # a fork's inherited history included
        for table, row_type, order in _TABLES:
            if src != "events" and table == "tool_calls":
                cur = conn.execute(_VIEW_CALLS.format(src=src), (*pre, session_id))
                parts[table] = [ToolCallRow(session_id, *r) for r in cur]
                continue
            cur = conn.execute(
                f"SELECT {', '.join(columns(row_type))} FROM {src if table == 'events' else table}"
                f" WHERE session_id = ? ORDER BY {order}",
                (*(pre if table == "events" else ()), session_id),
            )
            parts[table] = [row_type(*r) for r in cur]
    finally:
        conn.execute("COMMIT")
    return SessionRows(session=SessionRow(*row), **parts)


def write_session_rows(conn: sqlite3.Connection, rows: SessionRows) -> None:
    """Insert the session and all its rows as they are (inside the caller's transaction).

    ``ConflictError`` when the session id, or any event id, already exists in this agent.
    The mirror cursor starts at 0, so the mirror files are written (verified) on activation.
    """
    session = rows.session
    if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session.id,)).fetchone():
        raise ConflictError(
            f"session_id: session {session.id!r} already exists in this agent "
            "(import with new_ids, or under another session id, to make a copy)",
            data={"field": "session_id"},
        )
    names = columns(SessionRow)
    conn.execute(
        f"INSERT INTO sessions ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
        msgspec.structs.astuple(session),
    )
    for table, row_type, _order in _TABLES:
        names = columns(row_type)
        items = getattr(rows, table)
        try:
            conn.executemany(
                f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                [msgspec.structs.astuple(r) for r in items],
            )
        except sqlite3.IntegrityError as exc:
            raise ConflictError(
                f"{table}: a row already exists in this agent ({exc}); import with new_ids "
                "to make a copy beside the original",
                data={"field": f"{table}[].id" if table == "events" else table},
            ) from exc
