"""Opening and migrating agent files (real files): versions 2 -> 3 -> 4, the WAL
checkpoint size, and what a read-only store accepts."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from session_server import ActorRegistry
from session_server.storage.event_queries import event_query
from session_server.storage.schema import READABLE_SCHEMA_VERSION, SCHEMA_VERSION
from session_server.storage.sqlite_open import (
    WAL_AUTOCHECKPOINT_PAGES,
    connect,
    migrate,
    wal_autocheckpoint_pages,
)
from session_server.values.errors import AgentUnavailableError
from session_server.values.events import SessionEvent
from tests.support.old_schema import undo_to

AGENT = "agent-1"
# What version 2 had beside the current schema.
V2_INDEX = "CREATE INDEX idx_events_session_created ON events(session_id, created_at)"


def db(root: Path) -> Path:
    return root / "agents" / AGENT / "agent.sqlite"


def indexes(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'").fetchall()
    return {r[0] for r in rows}


def version(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])


def stamped(text: str, ms: int) -> SessionEvent:
    return SessionEvent(action="user_message", content=text, timestamp=ms)


async def file_of_version_2(root: Path) -> str:
    """An agent file as version 2 left it (its index and version number), with 6 events
    whose timestamps are 1000..1005; the session id."""
    async with ActorRegistry(root, idle_timeout=None) as reg:
        actor = await reg.get(AGENT)
        sid = await actor.create_session()
        await actor.append_events(sid, [stamped(f"u{i}", 1000 + i) for i in range(6)])
    with sqlite3.connect(db(root)) as conn:
        for statement in undo_to(3):
            conn.execute(statement)
        conn.execute(V2_INDEX)
        conn.execute("PRAGMA user_version=2")
    return sid


async def file_of_version_3(root: Path) -> str:
    """An agent file as version 3 left it, with 6 events; the session id."""
    sid = await file_of_version_2(root)
    with sqlite3.connect(db(root)) as conn:
        conn.execute("DROP INDEX idx_events_session_created")
        conn.execute("PRAGMA user_version=3")
    return sid


def test_a_new_file_has_no_created_at_index(tmp_path: Path) -> None:
    conn = connect(tmp_path / "a.sqlite", synchronous="FULL", busy_timeout_ms=100, readonly=False)
    try:
        migrate(conn)
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert "idx_events_session_seq" in names
        assert "idx_events_session_created" not in names
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        conn.close()


@pytest.mark.parametrize(("level", "pages"), [("NORMAL", 4000), ("FULL", 1000)])
def test_the_writer_checkpoints_at_the_wal_size_of_its_level(
    tmp_path: Path, level: str, pages: int
) -> None:
    writer = connect(tmp_path / "a.sqlite", synchronous=level, busy_timeout_ms=100, readonly=False)
    try:
        migrate(writer)
        assert writer.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == pages
        assert wal_autocheckpoint_pages(level.lower()) == WAL_AUTOCHECKPOINT_PAGES[level] == pages
    finally:
        writer.close()


async def test_a_file_of_version_2_is_migrated_and_keeps_its_events(tmp_path: Path) -> None:
    sid = await file_of_version_2(tmp_path)
    assert "idx_events_session_created" in indexes(db(tmp_path))
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get(AGENT)
        events = await actor.load_events(sid, limit=None, tail=False)
        assert [e.content for e in events] == [f"u{i}" for i in range(6)]
        assert [e.seq for e in await actor.load_events(sid, since=1004)] == [5, 6]
        # version 4's usage tables and columns are there after the migration
        await actor.append_events(sid, [stamped("u6", 1006)])
        await actor.set_session_budget(sid, {"max_total_tokens": 5})
        assert (await actor.memory_usage(session_id=sid))["totals"]["turns"] == 0
    assert version(db(tmp_path)) == SCHEMA_VERSION
    assert "idx_events_session_created" not in indexes(db(tmp_path))


async def test_a_file_of_version_3_is_migrated_and_forks(tmp_path: Path) -> None:
    sid = await file_of_version_3(tmp_path)
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get(AGENT)
        row = await actor.get_session(sid)
        assert row is not None and row["parent_session_id"] is None and row["fork_seq"] is None
        fork = await actor.fork_session(sid, at_seq=3)
        assert [e.content for e in await actor.load_events(fork.session_id)] == ["u0", "u1", "u2"]
        assert (await actor.rewind_session(sid, 2)).branch_session_id is not None
    assert version(db(tmp_path)) == SCHEMA_VERSION
    assert "idx_sessions_parent" in indexes(db(tmp_path))


async def test_a_read_only_store_reads_the_current_version(tmp_path: Path) -> None:
    """A session row is read with its fork columns (version 6): a reader reads a file of
    the current version as it is and leaves it as it found it."""
    sid = await file_of_version_3(tmp_path)
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        await (await reg.get(AGENT)).list_sessions()  # migrated by a writer
    assert READABLE_SCHEMA_VERSION <= SCHEMA_VERSION
    async with ActorRegistry(tmp_path, idle_timeout=None, readonly=True) as reg:
        actor = await reg.get(AGENT)
        assert [s["id"] for s in await actor.list_sessions()] == [sid]
        assert [e.seq for e in await actor.load_events(sid, since=1003)] == [4, 5, 6]
        row = await actor.get_session(sid) or {}
        assert row["budget"] is None and row["expires_at"] is None
        assert (await actor.memory_usage())["totals"]["turns"] == 0
    assert version(db(tmp_path)) == SCHEMA_VERSION


async def test_a_read_only_store_refuses_version_3(tmp_path: Path) -> None:
    await file_of_version_3(tmp_path)
    async with ActorRegistry(tmp_path, idle_timeout=None, readonly=True) as reg:
        with pytest.raises(AgentUnavailableError, match="schema version 3, older than"):
            await (await reg.get(AGENT)).list_sessions()
    assert version(db(tmp_path)) == 3


async def test_a_read_only_store_refuses_version_1(tmp_path: Path) -> None:
    await file_of_version_2(tmp_path)
    with sqlite3.connect(db(tmp_path)) as conn:
        conn.execute("PRAGMA user_version=1")
    async with ActorRegistry(tmp_path, idle_timeout=None, readonly=True) as reg:
        with pytest.raises(AgentUnavailableError, match="schema version 1, older than"):
            await (await reg.get(AGENT)).list_sessions()


def test_a_since_read_searches_one_session_by_seq(tmp_path: Path) -> None:
    """Without a created_at index a ``since`` read still looks only at the session's own
    events (the seq index), never the whole table."""
    conn = connect(tmp_path / "a.sqlite", synchronous="FULL", busy_timeout_ms=100, readonly=False)
    try:
        migrate(conn)
        q = event_query(
            "s", max_bytes=None, partial=True, limit=10, tail=False, since=5,
            after_seq=None, actions=None,
        )  # fmt: skip
        assert q is not None
        plan = " ".join(
            r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {q.sql.format(src='events')}", q.args)
        )
        assert "idx_events_session_seq (session_id=?)" in plan, plan
        assert "SCAN events" not in plan, plan
    finally:
        conn.close()
