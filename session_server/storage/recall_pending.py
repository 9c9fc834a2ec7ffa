"""The recall index's queues (I/O): index the events a transaction wrote, and erase the
ones it deleted, before it commits.

The triggers on ``events`` (``schema.sql``) queue every written event's rowid in
``recall_pending`` and every deleted (or rewritten) one's in ``events_fts_gone``;
``index_pending`` (called by ``transactions.write_txn`` just before ``COMMIT``) erases
the deleted ones from their shards (merging those shards, so no posting of their text is
left: ``recall_shards.erase_rows``) and indexes the written ones with
``values.recall.indexed_text``. So every write of the store keeps the index in step in
its own transaction, with no code of the write knowing about it, while a plain SQLite
client (a test, a hand repair) may still write events: its rows wait in the queues for
the store's next write (or the backfill).
"""

from __future__ import annotations

import sqlite3

from ..values.recall import indexed_text
from .recall_shards import erase_rows, index_rows

__all__ = ["erase_queued", "index_pending"]


def index_pending(conn: sqlite3.Connection, limit: int | None = None) -> int:
    """Erase the queued deletes, then index the queued events (at most ``limit``; all
    when ``None``), inside the caller's transaction; returns how many events were taken
    from the queue."""
    gone = conn.execute("SELECT event_rowid FROM events_fts_gone ORDER BY event_rowid").fetchall()
    if gone:
        erase_rows(conn, (r[0] for r in gone))
        conn.execute("DELETE FROM events_fts_gone")
    sql = (
        "SELECT p.event_rowid, e.action, e.content, e.metadata FROM recall_pending AS p"
        " LEFT JOIN events AS e ON e.rowid = p.event_rowid ORDER BY p.event_rowid"
    )
    rows = conn.execute(sql if limit is None else f"{sql} LIMIT {int(limit)}").fetchall()
    if not rows:
        return 0
    index_rows(
        conn,
        [(r[0], text) for r in rows if (text := indexed_text(r[1], r[2], r[3])) is not None],
    )
    if limit is None:
        conn.execute("DELETE FROM recall_pending")
    else:
        conn.execute("DELETE FROM recall_pending WHERE event_rowid <= ?", (rows[-1][0],))
    return len(rows)


def erase_queued(conn: sqlite3.Connection) -> bool:
    """Work the queues in a transaction of their own when a plain SQLite client deleted
    events (its deletes are queued, their text still in the index): called when the
    store opens the file, before it erases a WAL left behind. True when it wrote."""
    if conn.execute("SELECT 1 FROM events_fts_gone LIMIT 1").fetchone() is None:
        return False
    conn.execute("BEGIN IMMEDIATE")
    try:
        index_pending(conn)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return True
