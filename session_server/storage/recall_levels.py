"""How many levels the recall index's FTS5 structure has, and the bound past which a
purge rebuilds the index instead of merging it (I/O: reads one row).

FTS5 keeps an index as segments on levels, described by its structure record (rowid 10
of ``events_fts_data``). Its ``'optimize'`` merges every segment into one, on a level
above the highest. The FTS5 of SQLite 3.40 (Debian 12's, the Python 3.11/3.12 builds
that link the system library) adds that level, and one more for the merge's output,
each time, and never drops the empty levels below: a purge after every delete grows the
structure by two levels per delete. Past 2000 levels (``FTS5_MAX_SEGMENT``) FTS5 reads
its own structure as corrupt: ``database disk image is malformed`` in the next write
that touches the index (an append's indexing, a delete's trigger), and no connection
can open the table again (``vtable constructor failed``), so the agent takes no more
writes. About 1000 deletes did it, in any order, with or without other writers. Later
SQLite versions bound the levels (about 65); there the bound below is never reached.

``purge`` (``recall_sql``) asks ``needs_rebuild`` first: past ``REBUILD_LEVELS`` it
runs FTS5's ``'rebuild'`` (the index made again from the table's own content, one
level, no posting of a deleted row left) instead of ``'optimize'``. The bound is half of
FTS5's limit, so a file keeps its margin whatever merges its writes start meanwhile.

``repair_levels`` (the store's open) rebuilds the index of a file that an older version
of this server left past the bound, and makes one it left past FTS5's limit readable
again: FTS5 cannot open such a table at all (not to rebuild, not to drop it), so its
structure record is first replaced by an empty one (a plain row of the shadow table
``events_fts_data``, the record FTS5 itself writes for a new table), then the rebuild
indexes every row of the table's content again.
"""

from __future__ import annotations

import sqlite3
from typing import Final

__all__ = [
    "FTS5_MAX_LEVELS",
    "REBUILD_LEVELS",
    "fts5_tables",
    "index_levels",
    "make_openable",
    "needs_rebuild",
    "repair_levels",
    "structure_levels",
]

FTS5_MAX_LEVELS: Final = 2000
"""Past this many levels FTS5 reads its structure record as corrupt."""

REBUILD_LEVELS: Final = 1000
"""A purge on an index with at least this many levels rebuilds it instead of merging."""

_STRUCTURE_ROWID: Final = 10
_V2_MARKER: Final = b"\xff\x00\x00\x01"  # newer FTS5 writes it after the cookie


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """SQLite's big-endian varint at ``at``: ``(value, next offset)``."""
    value = 0
    for i in range(9):
        byte = data[at]
        at += 1
        if i == 8:
            return (value << 8) | byte, at
        value = (value << 7) | (byte & 0x7F)
        if not byte & 0x80:
            return value, at
    raise AssertionError("unreachable")  # pragma: no cover


def structure_levels(record: bytes) -> int | None:
    """The level count of an FTS5 structure record (a 4-byte cookie, FTS5's v2 marker
    in newer versions, then the level count as a varint); ``None`` when the record is
    too short to hold one."""
    at = 4
    if record[at : at + 4] == _V2_MARKER:
        at += 4
    if len(record) <= at:
        return None
    try:
        return _varint(record, at)[0]
    except IndexError:
        return None


def index_levels(conn: sqlite3.Connection, table: str = "events_fts") -> int | None:
    """The level count of the FTS5 table ``table``'s structure; ``None`` when the table
    has no structure record yet (FTS5 writes it with the first change)."""
    row = conn.execute(
        f"SELECT block FROM {table}_data WHERE id = ?", (_STRUCTURE_ROWID,)
    ).fetchone()
    if row is None or not isinstance(row[0], bytes):
        return None
    return structure_levels(row[0])


def needs_rebuild(conn: sqlite3.Connection, table: str = "events_fts") -> bool:
    """Whether the next merge of ``table`` must be a rebuild (``REBUILD_LEVELS``)."""
    levels = index_levels(conn, table)
    return levels is not None and levels >= REBUILD_LEVELS


def _empty_structure(record: bytes) -> bytes:
    """An empty structure record (no level, no segment, no write) with the next cookie,
    so that a connection holding the old structure in its cache reads it again."""
    cookie = (int.from_bytes(record[:4], "big") + 1) & 0xFFFFFFFF
    return cookie.to_bytes(4, "big") + b"\x00\x00\x00"


def make_openable(conn: sqlite3.Connection, table: str = "events_fts") -> int | None:
    """Inside the caller's write transaction: when ``table``'s structure is past FTS5's
    limit (no connection can open the table, not even to drop it), replace its record
    by an empty one, so that FTS5 opens it again (to rebuild or drop it: the postings
    are left unreachable until then). Returns the level count it found past the limit,
    else ``None``. A file without the table's shadow tables is left alone."""
    shadow = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (f"{table}_data",)
    ).fetchone()
    if shadow is None:
        return None
    row = conn.execute(
        f"SELECT block FROM {table}_data WHERE id = ?", (_STRUCTURE_ROWID,)
    ).fetchone()
    if row is None or not isinstance(row[0], bytes):
        return None
    levels = structure_levels(row[0])
    if levels is None or levels <= FTS5_MAX_LEVELS:
        return None
    conn.execute(
        f"UPDATE {table}_data SET block = ? WHERE id = ?",
        (_empty_structure(row[0]), _STRUCTURE_ROWID),
    )
    return levels


def repair_levels(conn: sqlite3.Connection, table: str = "events_fts") -> int | None:
    """At a writer's open (no transaction open): rebuild ``table``'s index when its
    structure has ``REBUILD_LEVELS`` levels or more, in one transaction; past FTS5's
    limit its structure record is emptied first (``make_openable``). Returns the level
    count found when it rebuilt, else ``None``."""
    levels = index_levels(conn, table)
    if levels is None or levels < REBUILD_LEVELS:
        return None
    conn.execute("BEGIN IMMEDIATE")
    try:
        make_openable(conn, table)
        conn.execute(f"INSERT INTO {table}({table}) VALUES ('rebuild')")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return levels


def fts5_tables(conn: sqlite3.Connection) -> list[str]:
    """The FTS5 tables of the file (the recall index: one, or one per shard)."""
    return [
        str(r[0])
        for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'"
            " AND sql LIKE 'CREATE VIRTUAL TABLE%USING fts5%' ORDER BY name"
        )
    ]
