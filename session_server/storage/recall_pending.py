"""The recall index's queue (I/O): index the events a transaction wrote, before it
commits.

The triggers on ``events`` (``schema.sql``) queue every written event's rowid in
``recall_pending``; ``index_pending`` (called by ``transactions.write_txn`` just before
``COMMIT``) turns them into ``events_fts`` rows with ``values.recall.indexed_text``. So
every write of the store indexes its events in its own transaction, with no code of the
write knowing about it, while a plain SQLite client (a test, a hand repair) may still
write events: its rows wait in the queue for the store's next write (or the backfill).
"""

from __future__ import annotations

import sqlite3

from ..values.recall import indexed_text

__all__ = ["index_pending"]


def index_pending(conn: sqlite3.Connection, limit: int | None = None) -> int:
    """Index the queued events (at most ``limit``; all when ``None``), inside the caller's
    transaction; returns how many were taken from the queue."""
    sql = (
        "SELECT p.event_rowid, e.action, e.content, e.metadata FROM recall_pending AS p"
        " LEFT JOIN events AS e ON e.rowid = p.event_rowid ORDER BY p.event_rowid"
    )
    rows = conn.execute(sql if limit is None else f"{sql} LIMIT {int(limit)}").fetchall()
    if not rows:
        return 0
    conn.executemany(
        "INSERT OR REPLACE INTO events_fts(rowid, text) VALUES (?, ?)",
        [(r[0], text) for r in rows if (text := indexed_text(r[1], r[2], r[3])) is not None],
    )
    if limit is None:
        conn.execute("DELETE FROM recall_pending")
    else:
        conn.execute("DELETE FROM recall_pending WHERE event_rowid <= ?", (rows[-1][0],))
    return len(rows)
