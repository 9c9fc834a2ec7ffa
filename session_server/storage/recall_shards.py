"""The recall index's shards (I/O): index events into them, erase deleted events from
them, and list them for a search.

Each shard is an FTS5 table ``events_fts_<n>`` (rowid: the event's) registered in
``events_fts_shards``; which shard holds an event is ``values.recall_shards.place``.
Everything here runs inside the caller's write transaction (``recall_pending.
index_pending``, the backfill, ``reindex``), so index and events always agree.

Erasure: FTS5 only marks a deleted row and keeps its postings until the segments
holding them merge. So the transaction that erases events also merges every shard it
erased from (``'optimize'``: the old postings go, and ``secure_delete`` zeroes the freed
pages), or drops the shard when it is left empty. A shard holds at most about
``SHARD_CHARS`` of text: a delete rewrites the shards of what it deleted, never the whole
index.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any, Final

from ..values.recall_shards import SHARD_CHARS, Shard, grown, place
from .recall_levels import needs_rebuild

__all__ = [
    "TOKENIZE",
    "drop_all",
    "erase_rows",
    "index_rows",
    "list_shards",
    "shard_table",
]

TOKENIZE: Final = "tokenize = \"unicode61 remove_diacritics 2 categories 'L* N* Co So'\""
"""Every shard's tokenizer (``values.recall``: diacritics folded, emoji as tokens)."""

_COLUMNS: Final = "shard, first_rowid, last_rowid, chars"

shard_chars: int = SHARD_CHARS
"""What a shard takes before new events start the next one (tests lower it to make many
shards of a few events)."""


def shard_table(shard: int) -> str:
    """The FTS5 table of shard ``shard``."""
    return f"events_fts_{int(shard)}"


def _row(row: Sequence[Any]) -> Shard:
    return Shard(int(row[0]), int(row[1]), int(row[2]), int(row[3]))


def _holder(conn: sqlite3.Connection, rowid: int) -> tuple[Shard | None, int | None]:
    """The shard holding ``rowid`` (greatest ``first_rowid`` not above it) and where its
    range ends (the next shard's ``first_rowid``; ``None``: open-ended)."""
    nxt = "(SELECT min(first_rowid) FROM events_fts_shards WHERE first_rowid > ?1)"
    row = conn.execute(  # one statement per turn: the holder and where its range ends
        f"SELECT {_COLUMNS}, {nxt} FROM events_fts_shards WHERE first_rowid <= ?1"
        " ORDER BY first_rowid DESC LIMIT 1",
        (rowid,),
    ).fetchone()
    if row is None:  # below every shard (or none yet)
        upper = conn.execute(f"SELECT {nxt}", (rowid,)).fetchone()[0]
        return None, (None if upper is None else int(upper))
    return _row(row), (None if row[4] is None else int(row[4]))


def _create(conn: sqlite3.Connection, first_rowid: int) -> Shard:
    shard = int(
        conn.execute("SELECT coalesce(max(shard), 0) + 1 FROM events_fts_shards").fetchone()[0]
    )
    table = shard_table(shard)
    # A table of that name left by an older file (a downgrade, a hand edit) is not ours.
    conn.execute(f"DROP TABLE IF EXISTS {table}")
    conn.execute(f"CREATE VIRTUAL TABLE {table} USING fts5(text, {TOKENIZE})")
    conn.execute(
        f"INSERT INTO events_fts_shards({_COLUMNS}) VALUES (?, ?, ?, 0)",
        (shard, first_rowid, first_rowid - 1),
    )
    return Shard(shard, first_rowid, first_rowid - 1, 0)


def index_rows(conn: sqlite3.Connection, rows: Iterable[tuple[int, str]]) -> None:
    """Index ``(rowid, text)`` rows, in rowid order, each into its shard (created on
    demand). A rowid already indexed is replaced (the backfill meeting an event its
    trigger indexed: the same text)."""
    current: Shard | None = None
    upper: int | None = None  # ``current`` holds rowids below this (None: all above)
    changed: dict[int, Shard] = {}
    batches: dict[int, list[tuple[int, str]]] = {}
    for rowid, text in rows:
        if current is None or rowid < current.first_rowid or (upper is not None and rowid >= upper):
            current, upper = _holder(conn, rowid)
            if current is not None:
                current = changed.get(current.shard, current)
        target = place(rowid, current, shard_chars)
        if not isinstance(target, Shard):  # its range ends where the holder's did
            target = _create(conn, target.first_rowid)
        current = grown(target, rowid, len(text))
        changed[current.shard] = current
        batches.setdefault(current.shard, []).append((rowid, text))
    for shard, items in batches.items():
        conn.executemany(
            f"INSERT OR REPLACE INTO {shard_table(shard)}(rowid, text) VALUES (?, ?)", items
        )
    conn.executemany(
        "UPDATE events_fts_shards SET last_rowid = ?, chars = ? WHERE shard = ?",
        [(s.last_rowid, s.chars, s.shard) for s in changed.values()],
    )


def erase_rows(conn: sqlite3.Connection, rowids: Iterable[int]) -> int:
    """Erase the index rows of ``rowids`` (deleted or rewritten events) and merge every
    shard that held one, or drop it when it is left empty, so no posting of their text
    is left. Returns how many shards were rewritten or dropped."""
    touched: set[int] = set()
    for rowid in rowids:
        holder, _ = _holder(conn, rowid)
        if holder is None:
            continue
        cur = conn.execute(f"DELETE FROM {shard_table(holder.shard)} WHERE rowid = ?", (rowid,))
        if cur.rowcount:
            touched.add(holder.shard)
    for shard in sorted(touched):
        table = shard_table(shard)
        if conn.execute(f"SELECT rowid FROM {table} LIMIT 1").fetchone() is None:
            conn.execute(f"DROP TABLE {table}")
            conn.execute("DELETE FROM events_fts_shards WHERE shard = ?", (shard,))
        else:
            # SQLite 3.40's FTS5 adds structure levels with each merge and reads more
            # than 2000 as corruption: a deep shard is rebuilt instead (``recall_levels``).
            command = "rebuild" if needs_rebuild(conn, table) else "optimize"
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('{command}')")
    return len(touched)


def list_shards(conn: sqlite3.Connection) -> list[Shard]:
    """Every shard, newest range first."""
    return [
        _row(r)
        for r in conn.execute(
            f"SELECT {_COLUMNS} FROM events_fts_shards ORDER BY first_rowid DESC"
        ).fetchall()
    ]


def drop_all(conn: sqlite3.Connection) -> None:
    """Drop every shard (``reindex``; their pages are zeroed: ``secure_delete``)."""
    for shard in list_shards(conn):
        conn.execute(f"DROP TABLE IF EXISTS {shard_table(shard.shard)}")
    conn.execute("DELETE FROM events_fts_shards")
