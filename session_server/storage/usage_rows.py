"""Usage rows, budgets and retention columns of one agent file (I/O, sqlite3).

Usage is kept in the rows a turn writes anyway (``values.usage_state``): the turn's last
event carries its usage (``events.usage``) and the session row its running totals per
model and the totals of its open UTC day (``sessions.usage``), both written by the
append's own statements (``sqlite_ops.append`` calls ``turn_usage``), so a turn and its
usage are stored together or not at all and usage adds no page to the turn's commit.
A turn on another day than its session's open day closes that day first: one upsert
into ``session_days`` and one into the agent's ``usage_days`` (``close_day``).

``memory.usage`` (``read_totals``) reads the smallest source that answers: the session
rows (totals: the agent, per model, per session, one session), the closed days plus
the open days (per day, or a window of whole UTC days), or else the turns' own records
(a window that does not fall on whole days: one session's events, or every event).
"""

from __future__ import annotations

import datetime
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any, Final, Literal, TypeVar

import msgspec

from ..values.records import CompactionRecord
from ..values.retention import RetentionPolicy, SessionAge
from ..values.usage import USAGE_FIELDS, Budget, UsageTotals
from ..values.usage_state import (
    DAY_MS,
    OPEN_DAY_DECODER,
    TOTALS_DECODER,
    Counts,
    add_turn,
    decode_session_usage,
    decode_turn,
    encode_session_usage,
    encode_turn,
    totals_of,
)
from .lineage_sql import count_in_view, events_source

__all__ = [
    "USAGE_SCHEMA_VERSION",
    "GroupBy",
    "delete_session_usage",
    "read_chart",
    "read_session_ages",
    "read_totals",
    "turn_usage",
]

GroupBy = Literal["session", "model", "day"] | None
T = TypeVar("T")

_COUNTS: Final = ", ".join(USAGE_FIELDS)
_RECORD_SUMS: Final = ", ".join(f"SUM(json_extract(usage, '$[{i}]'))" for i in range(5))

USAGE_SCHEMA_VERSION: Final = 12
"""The first schema version with usage in the turn's own rows (``events.usage``,
``sessions.usage``). A read-only store reads older files as they are
(``READABLE_SCHEMA_VERSION``): it answers no usage for them."""


def _upsert(table: str, keys: str, marks: str) -> str:
    return (
        f"INSERT INTO {table} ({keys}, model, {_COUNTS}, turns)"
        f" VALUES ({marks}, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET "
        + ", ".join(f"{f} = {f} + excluded.{f}" for f in (*USAGE_FIELDS, "turns"))
    )


_UPSERT_SESSION_DAY: Final = _upsert("session_days", "session_id, day", "?, ?")
_UPSERT_AGENT_DAY: Final = _upsert("usage_days", "day", "?")
_SUBTRACT_DAYS: Final = (
    "UPDATE usage_days SET "
    + ", ".join(f"{f} = usage_days.{f} - gone.{f}" for f in (*USAGE_FIELDS, "turns"))
    + f" FROM (SELECT day, model, {_COUNTS}, turns FROM session_days WHERE session_id = ?)"
    " AS gone WHERE usage_days.day = gone.day AND usage_days.model = gone.model"
)


def has_usage(conn: sqlite3.Connection) -> bool:
    """Whether the file keeps usage as this program reads it (a read-only store may read
    an older file it cannot migrate)."""
    return int(conn.execute("PRAGMA user_version").fetchone()[0]) >= USAGE_SCHEMA_VERSION


def turn_usage(
    conn: sqlite3.Connection,
    session_id: str,
    stored: str | None,
    usage: UsageTotals,
    at: int,
) -> tuple[str, str]:
    """Inside the turn's append transaction: the turn's record (``events.usage`` of its
    last event) and the session's usage after it (``sessions.usage``; ``stored``: before
    it). A turn on a new UTC day closes the open one first (``close_day``)."""
    state, day, closed = add_turn(decode_session_usage(stored), usage, at // DAY_MS)
    if day is not None and closed:
        close_day(conn, session_id, day, closed)
    return encode_turn(usage), encode_session_usage(state)


def close_day(
    conn: sqlite3.Connection, session_id: str, day: int, totals: dict[str, Counts]
) -> None:
    """Add a session's totals of ``day`` to the closed days (the session's and the
    agent's)."""
    conn.executemany(
        _UPSERT_SESSION_DAY, [(session_id, day, model, *c) for model, c in totals.items()]
    )
    conn.executemany(_UPSERT_AGENT_DAY, [(day, model, *c) for model, c in totals.items()])


def delete_session_usage(conn: sqlite3.Connection, session_id: str) -> int:
    """Inside a session delete's transaction: its closed days go, and the agent's daily
    totals lose what they counted of it (its totals and open day go with its row, its
    turn records with its events). Returns the rows deleted."""
    if not has_usage(conn):
        return 0
    conn.execute(_SUBTRACT_DAYS, (session_id,))
    conn.execute("DELETE FROM usage_days WHERE turns <= 0")
    deleted: int = conn.execute(
        "DELETE FROM session_days WHERE session_id = ?", (session_id,)
    ).rowcount
    return deleted


def _date(day: int) -> str:
    return (datetime.date(1970, 1, 1) + datetime.timedelta(days=day)).isoformat()


class _Sums:
    """Counts added up per (group key, model)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str | None, str], Counts] = {}

    def add(self, key: str | None, model: str, counts: Counts) -> None:
        have = self.rows.get((key, model))
        if have is None:
            self.rows[(key, model)] = list(counts)
        else:
            for i, v in enumerate(counts):
                have[i] += v

    def answer(self) -> list[tuple[str | None, UsageTotals]]:
        def order(item: tuple[tuple[str | None, str], Counts]) -> tuple[bool, str, bool, str]:
            (key, model), _ = item
            return (key is not None, key or "", model != "", model)

        return [
            (key, totals_of(c, model)) for (key, model), c in sorted(self.rows.items(), key=order)
        ]


def _session_rows(
    conn: sqlite3.Connection, session_id: str | None, decoder: msgspec.json.Decoder[T]
) -> Iterator[tuple[str, T]]:
    if session_id is None:
        cursor = conn.execute("SELECT id, usage FROM sessions WHERE usage IS NOT NULL")
    else:
        cursor = conn.execute(
            "SELECT id, usage FROM sessions WHERE id = ? AND usage IS NOT NULL", (session_id,)
        )
    for sid, text in cursor:
        yield str(sid), decoder.decode(text)


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
    ``until`` exclusive) select turns by their time (module docstring: the sources)."""
    if not has_usage(conn):
        return []
    sums = _Sums()
    windowed = since is not None or until is not None
    whole_days = all(t is None or t % DAY_MS == 0 for t in (since, until))

    def key_of(sid: str, model: str, day: int) -> str | None:
        if group_by == "session":
            return sid
        if group_by == "model":
            return model or None
        if group_by == "day":
            return _date(day)
        return None

    if not windowed and group_by != "day":
        for sid, totals in _session_rows(conn, session_id, TOTALS_DECODER):
            for model, counts in totals.t.items():
                sums.add(key_of(sid, model, 0), model, counts)
        return sums.answer()
    if whole_days:
        first = None if since is None else since // DAY_MS
        end = None if until is None else until // DAY_MS

        def in_range(day: int) -> bool:
            return (first is None or day >= first) and (end is None or day < end)

        for sid, open_day in _session_rows(conn, session_id, OPEN_DAY_DECODER):
            if open_day.d is not None and in_range(open_day.d):
                for model, counts in open_day.p.items():
                    sums.add(key_of(sid, model, open_day.d), model, counts)
        where: list[str] = []  # the closed days
        args: list[Any] = []
        if first is not None:
            where.append("day >= ?")
            args.append(first)
        if end is not None:
            where.append("day < ?")
            args.append(end)
        if session_id is None and group_by != "session":
            table, sid_column = "usage_days", "''"
        else:
            table, sid_column = "session_days", "session_id"
            if session_id is not None:
                where.append("session_id = ?")
                args.append(session_id)
        sql = f"SELECT {sid_column}, day, model, {_COUNTS}, turns FROM {table}" + (
            " WHERE " + " AND ".join(where) if where else ""
        )
        for r in conn.execute(sql, args):
            sums.add(key_of(r[0], r[2], r[1]), r[2], list(r[3:]))
        return sums.answer()
    # A window of parts of days: the turns' own records, summed by SQLite.
    where = ["usage IS NOT NULL"]
    args = []
    if session_id is not None:
        where.append("session_id = ?")
        args.append(session_id)
    if since is not None:
        where.append("created_at >= ?")
        args.append(since)
    if until is not None:
        where.append("created_at < ?")
        args.append(until)
    key = {"session": "session_id", "day": f"created_at / {DAY_MS}"}.get(group_by or "", "''")
    sql = (
        f"SELECT {key}, COALESCE(json_extract(usage, '$[5]'), ''), {_RECORD_SUMS}, COUNT(*)"
        f" FROM events WHERE {' AND '.join(where)} GROUP BY 1, 2"
    )
    for r in conn.execute(sql, args):
        sums.add(key_of(r[0], r[1], r[0] if group_by == "day" else 0), r[1], list(r[2:]))
    return sums.answer()


def read_chart(conn: sqlite3.Connection, session_id: str, limit: int) -> dict[str, Any]:
    """The newest ``limit`` turns of a session still stored (oldest first) and the seqs
    of its compactions in their span: what the inspector's chart draws."""
    if not has_usage(conn):
        return {"turns": [], "compactions": []}
    rows = conn.execute(
        "SELECT seq, turn, usage, created_at FROM events"
        " WHERE session_id = ? AND usage IS NOT NULL"
        " ORDER BY seq DESC LIMIT ?",
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
    turns = []
    for seq, number, text, at in rows:
        record = decode_turn(text)
        turns.append(
            {
                "seq": seq,
                "turn": number,
                "created_at": at,
                "model": record.model,
                **dict(zip(USAGE_FIELDS, record.totals().counts(), strict=True)),
            }
        )
    return {"turns": turns, "compactions": compactions}


def read_session_column(
    conn: sqlite3.Connection, session_id: str, column: Literal["budget", "retention"]
) -> tuple[bool, str | None]:
    """Whether the session exists, and its ``budget`` or ``retention`` JSON."""
    name = column if has_usage(conn) else "NULL"
    row = conn.execute(f"SELECT {name} FROM sessions WHERE id = ?", (session_id,)).fetchone()
    return (row is not None, None if row is None else row[0])


def read_usage_columns(
    conn: sqlite3.Connection, session_ids: list[str]
) -> dict[str, tuple[str | None, str | None]]:
    """The ``budget`` and ``retention`` JSON of each of ``session_ids`` that exists."""
    out: dict[str, tuple[str | None, str | None]] = {}
    if not has_usage(conn):
        return out
    for start in range(0, len(session_ids), 500):  # within SQLite's bound on variables
        chunk = session_ids[start : start + 500]
        marks = ",".join("?" * len(chunk))
        for r in conn.execute(
            f"SELECT id, budget, retention FROM sessions WHERE id IN ({marks})", chunk
        ):
            out[str(r[0])] = (r[1], r[2])
    return out


def read_session_ages(
    conn: sqlite3.Connection, with_raw: bool | Callable[[RetentionPolicy | None], bool]
) -> list[SessionAge]:
    """Every session's times and retention policy; with ``with_raw`` (or where it says
    so of the session's own policy), also its count of raw events and the boundary of
    its latest summary (for ``max_raw_events``: two queries per session)."""
    out: list[SessionAge] = []
    column = "retention" if has_usage(conn) else "NULL"
    for sid, created, updated, retention, last_seq in conn.execute(
        f"SELECT id, created_at, updated_at, {column}, last_seq FROM sessions"
    ):
        policy = None if retention is None else msgspec.json.decode(retention, type=RetentionPolicy)
        raw, boundary = 0, None
        if with_raw is True or (callable(with_raw) and with_raw(policy)):
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
