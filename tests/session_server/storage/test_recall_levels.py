"""The recall index's structure levels: read from FTS5's structure record, and bounded
by the purge after deletes (a rebuild past ``REBUILD_LEVELS``), so that a thousand
deletes never leave an index FTS5 reads as corrupt (SQLite 3.40's FTS5 adds two levels
with each 'optimize')."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from session_server.storage import recall_sql
from session_server.storage.file_check import check_agent_file
from session_server.storage.recall_levels import (
    FTS5_MAX_LEVELS,
    REBUILD_LEVELS,
    fts5_tables,
    index_levels,
    structure_levels,
)
from session_server.storage.sqlite_open import connect, migrate
from session_server.storage.store import AgentStore
from session_server.storage.transactions import write_txn

COOKIE = b"\x00\x00\x00\x07"


def _varint(value: int) -> bytes:
    """SQLite's varint (big-endian groups of 7 bits, high bit: more follow)."""
    groups = [value & 0x7F]
    value >>= 7
    while value:
        groups.append((value & 0x7F) | 0x80)
        value >>= 7
    return bytes(reversed(groups))


@given(st.integers(min_value=0, max_value=2**35), st.booleans())
def test_structure_levels_reads_the_level_count_of_either_format(levels: int, v2: bool) -> None:
    record = COOKIE + (b"\xff\x00\x00\x01" if v2 else b"") + _varint(levels) + b"\x01\x02"
    assert structure_levels(record) == levels


def test_structure_levels_of_a_record_too_short_is_none() -> None:
    assert structure_levels(COOKIE) is None
    assert structure_levels(COOKIE + b"\x81") is None  # a varint cut short


def _fts_check(path: Path) -> None:
    """FTS5's own check of every shard of the index, on a connection of its own (a fresh
    connection reads the structure record again: a corrupt one fails to open the table)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for table in fts5_tables(conn):
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        conn.close()


def _levels(conn: sqlite3.Connection) -> int:
    """The deepest structure of the index's shards."""
    return max((index_levels(conn, t) or 0 for t in fts5_tables(conn)), default=0)


def _shard(conn: sqlite3.Connection) -> str:
    """The one shard of a small index."""
    (table,) = fts5_tables(conn)
    return table


def _add(conn: sqlite3.Connection, n: int, session: str | None = None) -> None:
    """Event ``e<n>``: the only one of session ``s<n>``, or the ``n + 1``-th of
    ``session``."""
    conn.execute(
        "INSERT INTO events(id, session_id, seq, action, content, created_at)"
        " VALUES (?, ?, ?, 'user_message', ?, 1)",
        (
            f"e{n}",
            session or f"s{n}",
            1 if session is None else n + 1,
            f"question {n} about the weather",
        ),
    )


def _delete(conn: sqlite3.Connection, n: int) -> None:
    conn.execute("DELETE FROM events WHERE id = ?", (f"e{n}",))


def test_a_thousand_deletes_with_a_writer_between_them_keep_the_index_readable(
    tmp_path: Path,
) -> None:
    """Each cycle is what a retention sweep beside a writing client does: a turn indexed
    (its own transaction), a delete (erased from its shard in the delete's transaction).
    Before the bound, the 1001st merge left a structure of 2002 levels: 'database disk
    image is malformed'."""
    path = tmp_path / "agent.sqlite"
    conn = connect(path, synchronous="NORMAL", busy_timeout_ms=5000, readonly=False)
    try:
        migrate(conn)
        write_txn(conn, "seed", lambda c: [_add(c, n) for n in range(200)])
        levels: list[int] = []
        for n in range(1100):
            write_txn(conn, "turn", _add, 200 + n)
            write_txn(conn, "delete", _delete, n)
            levels.append(_levels(conn))
        # The levels grew (the old FTS5) or stayed bounded (a later one), never past the
        # bound and the two levels of one merge.
        assert max(levels) <= REBUILD_LEVELS + 2 < FTS5_MAX_LEVELS
        table = _shard(conn)
        alive = conn.execute(
            f"SELECT count(*) FROM {table} WHERE {table} MATCH 'weather'"
        ).fetchone()[0]
        assert alive == 200
        gone = conn.execute(
            f"SELECT count(*) FROM {table} WHERE {table} MATCH '\"question 5 about\"'"
        ).fetchone()[0]
        assert gone == 0
    finally:
        conn.close()
    _fts_check(path)


async def test_a_sweep_sized_run_of_session_deletes_leaves_a_readable_index(
    tmp_path: Path,
) -> None:
    """The same through the store, as the actor runs it: each delete on the store's
    worker threads with its purge and WAL truncation after it, a writer's turn between
    every two deletes."""
    path = tmp_path / "agent.sqlite"
    store = await AgentStore.open(path, "agent", synchronous="NORMAL")
    try:
        sessions = [await store.create_session(None, f"s{n}") for n in range(1050)]
        writer = await store.create_session(None, "writer")
        await store.transact("seed", lambda c: [_add(c, n) for n in range(len(sessions))])

        def turn(conn: sqlite3.Connection, seq: int) -> None:
            conn.execute(
                "INSERT INTO events(id, session_id, seq, action, content, created_at)"
                " VALUES (?, ?, ?, 'user_message', ?, 1)",
                (f"w{seq}", writer, seq, f"turn {seq} of the writer"),
            )

        for n, sid in enumerate(sessions):
            if n % 2:
                await store.transact("turn", turn, n)
            assert await store.delete_session(sid) is True
        levels = await store.query(_levels)
        assert 0 < levels <= REBUILD_LEVELS + 2
        weather = recall_sql.RecallFilter(expr="weather", limit=5)
        assert (await store.recall_search(weather))[0] == []
        writer_turns = recall_sql.RecallFilter(expr="writer", limit=1000)
        assert len((await store.recall_search(writer_turns))[0]) == len(sessions) // 2
    finally:
        await store.close()
    _fts_check(path)


async def _file_an_older_server_left(tmp_path: Path, past: int) -> Path:
    """An agent file whose index structure has more than ``past`` levels: deletes each
    followed by 'optimize' alone, as the purge of an older server ran them (a plain
    SQLite client here, and on the FTS5 of any SQLite version the levels then come
    from the record: a later FTS5 bounds them, and the file is then left as it is)."""
    path = tmp_path / "agent.sqlite"
    store = await AgentStore.open(path, "agent", synchronous="NORMAL")
    await store.create_session(None, "s")
    await store.transact("seed", lambda c: [_add(c, n, "s") for n in range(1200)])
    await store.transact(
        "last seq", lambda c: c.execute("UPDATE sessions SET last_seq = 1200 WHERE id = 's'")
    )
    await store.close()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        table = _shard(conn)
        for n in range(1100):
            levels = index_levels(conn, table) or 0
            if levels > past:
                break
            _delete(conn, n)
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")
    finally:
        conn.close()
    return path


async def test_opening_a_file_left_past_fts5s_limit_makes_its_index_readable(
    tmp_path: Path,
) -> None:
    path = await _file_an_older_server_left(tmp_path, FTS5_MAX_LEVELS)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        table = _shard(conn)
        levels = index_levels(conn, table)
        assert levels is not None
        try:
            conn.execute(f"SELECT count(*) FROM {table}").fetchone()
            readable = True
        except sqlite3.DatabaseError:  # 'vtable constructor failed'
            readable = False
    finally:
        conn.close()
    # SQLite 3.40's FTS5: past 2000 levels no connection opens the table any more.
    assert readable == (levels <= FTS5_MAX_LEVELS)
    store = await AgentStore.open(path, "agent", synchronous="NORMAL")
    try:
        left = await store.query(
            lambda c: int(c.execute("SELECT count(*) FROM events").fetchone()[0])
        )
        assert await store.query(_levels) < REBUILD_LEVELS
        await store.transact("turn", _add, 1200, "s")  # indexed in its transaction
        assert await store.delete_events("s", ["e1150"]) == 1
        hits, _ = await store.recall_search(recall_sql.RecallFilter(expr="weather", limit=2000))
        assert len(hits) == left  # every event still stored, the new one in, the deleted out
    finally:
        await store.close()
    _fts_check(path)


async def test_opening_a_file_near_the_limit_rebuilds_its_index(tmp_path: Path) -> None:
    path = await _file_an_older_server_left(tmp_path, REBUILD_LEVELS)
    store = await AgentStore.open(path, "agent", synchronous="NORMAL")
    try:
        assert await store.query(_levels) < REBUILD_LEVELS
    finally:
        await store.close()
    _fts_check(path)


async def test_a_backup_of_a_file_left_past_the_limit_passes_the_staged_file_check(
    tmp_path: Path,
) -> None:
    """A restore or import replaces the recall objects of the staged copy: FTS5 must
    open the table to drop it."""
    path = await _file_an_older_server_left(tmp_path, FTS5_MAX_LEVELS)
    assert check_agent_file(path) == 1
    _fts_check(path)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        assert _levels(conn) < REBUILD_LEVELS
    finally:
        conn.close()
