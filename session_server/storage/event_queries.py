"""The SQL of ``AgentStore.load_events_bounded``: a session's events under filters, a
count limit and a byte bound (the query is planned on the loop, read on a worker thread).

SQLite sums the events' sizes first (``EVENT_SIZE_SQL``; no row reaches Python beyond the
bound, and the sum looks at no more rows than could fit), so memory and work stay about
``max_bytes`` however long the session.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any, Final

import msgspec

from ..values.errors import InvalidParamsError
from ..values.events import ACTIONS, SessionEvent
from .lineage_sql import events_source
from .stored_rows import EVENT_COLUMNS, rows_to_events

__all__ = ["EVENT_OVERHEAD", "EVENT_SIZE_SQL", "EventQuery", "event_query", "read_events"]

# An event's size in an answer, about: its text columns plus the JSON around them
# (id, seq, action, timestamps and keys take more than EVENT_OVERHEAD bytes).
EVENT_OVERHEAD: Final = 160
EVENT_SIZE_SQL: Final = (
    "COALESCE(LENGTH(CAST(content AS BLOB)), 0)"
    f" + COALESCE(LENGTH(CAST(metadata AS BLOB)), 0) + {EVENT_OVERHEAD}"
)


class EventQuery(msgspec.Struct, frozen=True):
    """A planned read: the filtered query, the size cut, and how to apply it (``{src}``
    in the SQL: what the session's events are selected from, ``lineage_sql``)."""

    sql: str
    cut_sql: str
    cond: str
    args: tuple[Any, ...]
    order: str
    limit_sql: str
    max_bytes: int | None
    partial: bool
    tail: bool
    session_id: str = ""


def event_query(
    session_id: str,
    *,
    max_bytes: int | None,
    partial: bool,
    limit: int | None,
    tail: bool,
    since: int | None,
    after_seq: int | None,
    actions: Iterable[str] | None,
) -> EventQuery | None:
    """Plan the read (the arguments of ``AgentStore.load_events_bounded``); ``None`` when
    ``actions`` is empty (nothing can match). ``InvalidParamsError`` for an unknown action.
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
            return None
        where.append(f"action IN ({','.join('?' * len(acts))})")
        args.extend(acts)
    order = "DESC" if tail else "ASC"
    cond = " AND ".join(where)
    limit_sql = "" if limit is None else f" LIMIT {max(0, int(limit))}"
    sql = f"SELECT {EVENT_COLUMNS} FROM {{src}} WHERE {cond} ORDER BY seq {order}{limit_sql}"
    # The first seq (in reading order) at which the running size passes max_bytes;
    # every event counts at least EVENT_OVERHEAD, so no more rows need summing.
    most = 1 if max_bytes is None else max_bytes // EVENT_OVERHEAD + 1
    rows_bound = f" LIMIT {most if limit is None else min(most, max(0, int(limit)))}"
    cut_sql = (
        f"SELECT seq, first FROM (SELECT seq, SUM({EVENT_SIZE_SQL}) OVER (ORDER BY seq "
        f"{order}) AS running, ROW_NUMBER() OVER (ORDER BY seq {order}) = 1 AS first "
        f"FROM (SELECT * FROM {{src}} WHERE {cond} ORDER BY seq {order}{rows_bound})) "
        "WHERE running > ? LIMIT 1"
    )
    return EventQuery(
        sql, cut_sql, cond, tuple(args), order, limit_sql, max_bytes, partial, tail, session_id
    )


def read_events(conn: sqlite3.Connection, q: EventQuery) -> tuple[list[SessionEvent], bool]:
    """Run a planned read: ``(events oldest first, complete)``."""
    src, pre = events_source(conn, q.session_id)
    query, params, complete = q.sql.format(src=src), (*pre, *q.args), True
    if q.max_bytes is not None:
        cut = conn.execute(q.cut_sql.format(src=src), [*pre, *q.args, q.max_bytes]).fetchone()
        if cut is not None:
            complete = False
            if not q.partial:
                return [], False
            # Stop before the row that passes the bound (at it, when it is the first).
            op = ("<" if not q.tail else ">") + ("=" if cut[1] else "")
            query = (
                f"SELECT {EVENT_COLUMNS} FROM {src} WHERE {q.cond} AND seq {op} ? "
                f"ORDER BY seq {q.order}{q.limit_sql}"
            )
            params = (*pre, *q.args, cut[0])
    events = rows_to_events(conn.execute(query, params).fetchall())
    if q.tail:
        events.reverse()
    return events, complete
