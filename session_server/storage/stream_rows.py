"""Live turns on disk: the ``streams`` and ``stream_segments`` rows (I/O).

Transaction bodies (run inside ``transactions.write_txn``) and reads, one function per
operation, as ``sqlite_ops`` has them. ``end_stream`` is also called by the append
transaction of ``stream.close {turn}`` (``sqlite_ops.append``: ``AppendBatch.end_stream``),
so the turn's events and the end of its stream commit together.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

import msgspec

from ..values.errors import NotFoundError
from ..values.streams import SegmentWrite

__all__ = [
    "SegmentItem",
    "StoredStream",
    "end_stream",
    "load_streams",
    "open_stream",
    "read_counters",
    "write_segments",
]


class StoredStream(msgspec.Struct, frozen=True):
    """An open stream as stored: its row and its segments (``(first_cursor, chunks,
    data)``, in cursor order)."""

    session_id: str
    stream_id: str
    generation: int
    first_cursor: int
    last_cursor: int
    base_seq: int | None
    updated_at: int
    segments: list[tuple[int, int, bytes]]


def load_streams(conn: sqlite3.Connection) -> list[StoredStream]:
    """Every open stream of the agent with its chunks (read in one snapshot)."""
    out: list[StoredStream] = []
    rows = conn.execute(
        "SELECT session_id, stream_id, generation, first_cursor, last_cursor, base_seq,"
        " updated_at FROM streams WHERE stream_id IS NOT NULL"
    ).fetchall()
    for sid, stream_id, gen, first, last, base, updated in rows:
        segments = [
            (int(r[0]), int(r[1]), str(r[2]).encode())
            for r in conn.execute(
                "SELECT first_cursor, chunks, data FROM stream_segments"
                " WHERE session_id = ? ORDER BY first_cursor",
                (sid,),
            )
        ]
        out.append(
            StoredStream(
                sid, stream_id, int(gen), int(first), int(last),
                None if base is None else int(base), int(updated), segments,
            )
        )  # fmt: skip
    return out


def read_counters(conn: sqlite3.Connection, session_id: str) -> tuple[int, int] | None:
    """``(generation, last_cursor)`` of the session's streams (``None``: none ever)."""
    row = conn.execute(
        "SELECT generation, last_cursor FROM streams WHERE session_id = ?", (session_id,)
    ).fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def open_stream(
    conn: sqlite3.Connection,
    session_id: str,
    stream_id: str,
    generation: int,
    first_cursor: int,
    base_seq: int | None,
    now: int,
) -> None:
    """Store the session's stream (new, or taken over with a higher generation)."""
    if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
        raise NotFoundError.session(session_id)
    conn.execute(
        "INSERT INTO streams (session_id, stream_id, generation, last_cursor, first_cursor,"
        " base_seq, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT(session_id) DO UPDATE SET stream_id = excluded.stream_id,"
        " generation = excluded.generation, first_cursor = excluded.first_cursor,"
        " base_seq = excluded.base_seq, updated_at = excluded.updated_at",
        (session_id, stream_id, generation, first_cursor - 1, first_cursor, base_seq, now),
    )


SegmentItem = tuple[str, str, int, Sequence[SegmentWrite], int]
"""``(session_id, stream_id, generation, writes, now)``: one stream's part of a flush."""


def write_segments(conn: sqlite3.Connection, items: Sequence[SegmentItem]) -> None:
    """Store the chunks of appends to several streams (one transaction)."""
    for item in items:
        _write_segments(conn, *item)


def _write_segments(
    conn: sqlite3.Connection,
    session_id: str,
    stream_id: str,
    generation: int,
    writes: Sequence[SegmentWrite],
    now: int,
) -> None:
    """Store an append's chunks (new segments, or more at the end of the open one) and
    the stream's last cursor. Refused when the stream is no longer this generation's
    (the actor checks first; this keeps the file consistent whatever happens)."""
    row = conn.execute(
        "SELECT stream_id, generation FROM streams WHERE session_id = ?", (session_id,)
    ).fetchone()
    if row is None or row[0] != stream_id or int(row[1]) != generation:
        raise NotFoundError(
            f"stream_id: no open stream {stream_id!r} of generation {generation}",
            data={"field": "stream_id"},
        )
    for w in writes:
        if w.extend:
            conn.execute(
                "UPDATE stream_segments SET data = data || ?, last_cursor = ?,"
                " chunks = chunks + ? WHERE session_id = ? AND first_cursor = ?",
                (w.data.decode(), w.last_cursor, w.chunks, session_id, w.first_cursor),
            )
        else:
            conn.execute(
                "INSERT INTO stream_segments (session_id, first_cursor, last_cursor, chunks,"
                " data) VALUES (?, ?, ?, ?, ?)",
                (session_id, w.first_cursor, w.last_cursor, w.chunks, w.data.decode()),
            )
    if writes:
        conn.execute(
            "UPDATE streams SET last_cursor = ?, updated_at = ? WHERE session_id = ?",
            (writes[-1].last_cursor, now, session_id),
        )


def end_stream(conn: sqlite3.Connection, session_id: str, stream_id: str) -> int:
    """End the session's stream ``stream_id``: its chunks deleted (zeroed on disk:
    ``secure_delete``), the row keeping only the counters. Returns the rows deleted."""
    deleted = conn.execute(
        "DELETE FROM stream_segments WHERE session_id = ?"
        " AND EXISTS (SELECT 1 FROM streams WHERE session_id = ? AND stream_id = ?)",
        (session_id, session_id, stream_id),
    ).rowcount
    conn.execute(
        "UPDATE streams SET stream_id = NULL, base_seq = NULL WHERE session_id = ?"
        " AND stream_id = ?",
        (session_id, stream_id),
    )
    return deleted
