"""Usage rows, budgets and retention columns of one agent file (I/O, sqlite3).

``record_usage`` runs inside the append transaction of its turn (``sqlite_ops.append``):
one ``turn_usage`` row and one upsert of the running total of its session, model and UTC
day, so a turn and its usage are stored together or not at all. ``memory.usage`` reads
the totals (``read_totals``): rows per session, model and day, not per turn, so it stays
fast at 100k turns; a ``since``/``until`` window that does not fall on whole UTC days
reads the turn rows instead.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, Final, Literal

import msgspec

from ..values.records import CompactionRecord
from ..values.retention import RetentionPolicy, SessionAge
from ..values.usage import USAGE_FIELDS, Budget, UsageTotals
from .lineage_sql import count_in_view, events_source

__all__ = [
    "GroupBy",
    "delete_session_usage",
    "read_chart",
    "read_session_ages",
    "read_totals",
    "record_usage",
]

DAY_MS: Final = 86_400_000

GroupBy = Literal["session", "model", "day"] | None

_COUNTS: Final = ", ".join(USAGE_FIELDS)
_SUMS: Final = ", ".join(f"SUM({f})" for f in USAGE_FIELDS)

_INSERT_TURN: Final = (
    f"INSERT OR REPLACE INTO turn_usage (session_id, seq, turn, created_at, model, {_COUNTS})"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def _upsert(table: str, key: str) -> str:
    return (
        f"INSERT INTO {table} ({key}, model, {_COUNTS}, turns)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, 1) ON CONFLICT DO UPDATE SET "
        + ", ".join(f"{f} = {f} + excluded.{f}" for f in USAGE_FIELDS)
        + ", turns = turns + 1"
    )


_UPSERT_SESSION: Final = _upsert("usage_totals", "session_id")
_UPSERT_DAY: Final = _upsert("usage_days", "day")
_SUBTRACT_DAYS: Final = (
    "UPDATE usage_days SET "
    + ", ".join(f"{f} = usage_days.{f} - gone.{f}" for f in USAGE_FIELDS)
    + ", turns = usage_days.turns - gone.turns FROM ("
    f"SELECT created_at / {DAY_MS} AS day, COALESCE(model, '') AS model, "
    + ", ".join(f"SUM({f}) AS {f}" for f in USAGE_FIELDS)
    + ", COUNT(*) AS turns FROM turn_usage WHERE session_id = ? GROUP BY 1, 2) AS gone"
    " WHERE usage_days.day = gone.day AND usage_days.model = gone.model"
)


USAGE_SCHEMA_VERSION: Final = 4
"""The first schema version with usage, budget and retention columns. A read-only store
reads older files as they are (``READABLE_SCHEMA_VERSION``): they have no usage."""


def has_usage(conn: sqlite3.Connection) -> bool:
    """Whether the file has the usage tables and columns (a read-only store may read an
    older file it cannot migrate)."""
    return int(conn.execute("PRAGMA user_version").fetchone()[0]) >= USAGE_SCHEMA_VERSION


def record_usage(
    conn: sqlite3.Connection,
    session_id: str,
    seq: int,
    turn: int,
    created_at: int,
    usage: UsageTotals,
) -> None:
    """Store one turn's usage (inside the turn's append transaction)."""
    counts = usage.counts()
    model = usage.model or ""
    conn.execute(_INSERT_TURN, (session_id, seq, turn, created_at, usage.model, *counts))
    conn.execute(_UPSERT_SESSION, (session_id, model, *counts))
    conn.execute(_UPSERT_DAY, (created_at // DAY_MS, model, *counts))


def delete_session_usage(conn: sqlite3.Connection, session_id: str) -> int:
    """Inside a session delete's transaction: its usage rows go, and the agent's daily
    totals lose what they counted of it. Returns the rows deleted."""
    if not has_usage(conn):
        return 0
    conn.execute(_SUBTRACT_DAYS, (session_id,))
    conn.execute("DELETE FROM usage_days WHERE turns <= 0")
    rows = 0
    for table in ("turn_usage", "usage_totals"):
        rows += conn.execute(f"DELETE FROM {table} WHERE session_id = ?", (session_id,)).rowcount
    return rows


def _totals(row: Sequence[Any], model: str | None) -> UsageTotals:
    counts = [int(v or 0) for v in row[:5]]
    return UsageTotals(
        counts[0], counts[1], counts[2], counts[3], counts[4], int(row[5] or 0), model
    )


def read_totals(
    conn: sqlite3.Connection,
    *,
    session_id: str | None = None,
    since: int | None = None,
    until: int | None = None,
    group_by: GroupBy = None,
) -> list[tuple[str | None, UsageTotals]]:
    """Usage summed per ``(group key, model)``: the key is the session id, the model,
    the UTC date (``YYYY-MM-DD``) or ``None`` (no grouping). ``since``/``until`` (ms,
    ``until`` exclusive) select turns by their time.

    The source is the smallest that answers: the per-session totals (no window, not by
    day), the agent's daily totals (whole-day window or by day, not per session), or
    else the turn rows (one session's: a key prefix; the agent's: a scan)."""
    if not has_usage(conn):
        return []
    windowed = since is not None or until is not None
    whole_days = all(t is None or t % DAY_MS == 0 for t in (since, until))
    where: list[str] = []
    args: list[Any] = []
    day = f"created_at / {DAY_MS}"
    model = "model"
    turns = "COUNT(*)"
    if session_id is None and not windowed and group_by != "day":
        table, model, turns = "usage_totals", "NULLIF(model, '')", "SUM(turns)"
    elif session_id is None and whole_days and group_by != "session":
        table, model, turns, day = "usage_days", "NULLIF(model, '')", "SUM(turns)", "day"
        if since is not None:
            where.append("day >= ?")
            args.append(since // DAY_MS)
        if until is not None:
            where.append("day < ?")
            args.append(until // DAY_MS)
    elif session_id is not None and not windowed and group_by != "day":
        table, model, turns = "usage_totals", "NULLIF(model, '')", "SUM(turns)"
    else:
        table = "turn_usage"
        if since is not None:
            where.append("created_at >= ?")
            args.append(since)
        if until is not None:
            where.append("created_at < ?")
            args.append(until)
    if session_id is not None:
        where.append("session_id = ?")
        args.append(session_id)
    key = {
        None: "NULL",
        "session": "session_id",
        "model": model,
        "day": f"date(({day}) * 86400, 'unixepoch')",
    }[group_by]
    sql = (
        f"SELECT {key}, {model}, {_SUMS}, {turns} FROM {table}"
        + (" WHERE " + " AND ".join(where) if where else "")
        + " GROUP BY 1, 2 ORDER BY 1, 2"
    )
    return [(r[0], _totals(r[2:], r[1])) for r in conn.execute(sql, args)]


def read_chart(conn: sqlite3.Connection, session_id: str, limit: int) -> dict[str, Any]:
    """The newest ``limit`` turns of a session (oldest first) and the seqs of its
    compactions in their span: what the inspector's chart draws."""
    if not has_usage(conn):
        return {"turns": [], "compactions": []}
    rows = conn.execute(
        f"SELECT seq, turn, created_at, model, {_COUNTS} FROM turn_usage"
        " WHERE session_id = ? ORDER BY seq DESC LIMIT ?",
        (session_id, limit),
    ).fetchall()
    rows.reverse()
    first = rows[0][0] if rows else 0
    compactions = [
        int(r[0])
        for r in conn.execute(
            "SELECT seq FROM events WHERE session_id = ? AND action = 'compaction' AND seq >= ?"
            " ORDER BY seq",
            (session_id, first),
        )
    ]
    turns = [
        {
            "seq": r[0],
            "turn": r[1],
            "created_at": r[2],
            "model": r[3],
            **dict(zip(USAGE_FIELDS, r[4:], strict=True)),
        }
        for r in rows
    ]
    return {"turns": turns, "compactions": compactions}


def read_session_column(
    conn: sqlite3.Connection, session_id: str, column: Literal["budget", "retention"]
) -> tuple[bool, str | None]:
    """Whether the session exists, and its ``budget`` or ``retention`` JSON."""
    name = column if has_usage(conn) else "NULL"
    row = conn.execute(f"SELECT {name} FROM sessions WHERE id = ?", (session_id,)).fetchone()
    return (row is not None, None if row is None else row[0])


def read_session_ages(conn: sqlite3.Connection, with_raw: bool) -> list[SessionAge]:
    """Every session's times and retention policy; with ``with_raw``, also its count of
    raw events and the boundary of its latest summary (for ``max_raw_events``)."""
    out: list[SessionAge] = []
    column = "retention" if has_usage(conn) else "NULL"
    for sid, created, updated, retention, last_seq in conn.execute(
        f"SELECT id, created_at, updated_at, {column}, last_seq FROM sessions"
    ):
        policy = None if retention is None else msgspec.json.decode(retention, type=RetentionPolicy)
        raw, boundary = 0, None
        if with_raw:
            raw, boundary = _raw_state(conn, sid)
        out.append(
            SessionAge(sid, int(created), int(updated), policy, raw, boundary, int(last_seq))
        )
    return out


def _raw_state(conn: sqlite3.Connection, session_id: str) -> tuple[int, int | None]:
    src, pre = events_source(conn, session_id)  # a fork's inherited history counts
    row = conn.execute(
        f"SELECT content, metadata, seq FROM {src} WHERE session_id = ? AND action = 'compaction'"
        " ORDER BY seq DESC LIMIT 1",
        (*pre, session_id),
    ).fetchone()
    if row is None:
        return 0, None
    boundary = _summary_boundary(row[1])
    if boundary is None:
        return 0, None
    count = count_in_view(conn, session_id, "COUNT(*)", "action != 'compaction'", ())
    return int(count), boundary


def _summary_boundary(metadata: str | None) -> int | None:
    """The first seq the latest compaction record's builder reads (``None``: it reads
    every event, as a placeholder record does)."""
    if not metadata:
        return None
    try:
        meta = msgspec.json.decode(metadata)
        data = meta.get("compaction") if isinstance(meta, dict) else None
        if not isinstance(data, dict):
            return None
        return CompactionRecord.decode(data).from_seq
    except Exception:  # a record the builder could not read either: keep everything
        return None


def budget_of(text: str | None) -> Budget | None:
    return None if text is None else msgspec.json.decode(text, type=Budget)
