"""The recall index in shards, over real agent files: a search merges every shard's best
hits, a delete rewrites (or drops) only the shards of what it deleted and leaves none of
its text in the file or the WAL, reused rowids, the migration from the single index of
version 8, and a restored file's shards replaced."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from session_server import ActorRegistry, AgentActor
from session_server.storage import recall_shards
from session_server.storage.file_check import check_agent_file
from session_server.storage.recall_shards import list_shards, shard_table
from session_server.storage.schema import SCHEMA_VERSION
from session_server.values.events import SessionEvent
from tests.support.old_schema import old_agent_file
from tests.support.recall_index import indexed_rowids

SHARD_CHARS = 400  # a shard of a few events: many shards from few turns


@pytest.fixture(autouse=True)
def small_shards(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(recall_shards, "shard_chars", SHARD_CHARS)
    yield


@pytest.fixture
async def actor(tmp_path: Path) -> AsyncIterator[AgentActor]:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        yield await reg.get("agent")


def _db(tmp_path: Path) -> Path:
    return tmp_path / "agents" / "agent" / "agent.sqlite"


def _read(db: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def names_now(db: Path) -> list[str]:
    return [str(r[0]) for r in _read(db, "SELECT name FROM sqlite_master")]


def _shard_objects(db: Path) -> list[str]:
    """The shards' tables (``events_fts_<n>`` and their shadow tables)."""
    return [n for n in names_now(db) if n.startswith("events_fts_") and n[11:12].isdigit()]


def _agree(db: Path) -> None:
    """Every indexable event indexed once, in the shard holding its rowid; nothing else."""
    conn = sqlite3.connect(db)
    try:
        counts = indexed_rowids(conn)
        events = {r[0] for r in conn.execute("SELECT rowid FROM events")}
    finally:
        conn.close()
    assert set(counts.values()) <= {1}
    assert set(counts) == events


def _shard_digests(db: Path) -> dict[int, str]:
    """Each shard's stored segments (its ``_data`` rows), hashed."""
    conn = sqlite3.connect(db)
    try:
        out = {}
        for shard in list_shards(conn):
            rows = conn.execute(
                f"SELECT id, block FROM {shard_table(shard.shard)}_data ORDER BY id"
            ).fetchall()
            out[shard.shard] = hashlib.sha256(repr(rows).encode()).hexdigest()
        return out
    finally:
        conn.close()


async def _say(actor: AgentActor, sid: str, *texts: str) -> list[int]:
    events = [SessionEvent(action="user_message", content=t) for t in texts]
    return list((await actor.append_events(sid, events)).seqs)


def _text(i: int) -> str:
    return f"common filler words for event {i} with its own marker uniq{i}x " * 2


async def test_a_search_merges_the_best_hits_of_every_shard(
    actor: AgentActor, tmp_path: Path
) -> None:
    a = await actor.create_session()
    b = await actor.create_session()
    for i in range(1, 41):
        await _say(actor, a if i % 2 else b, _text(i))
    await _say(actor, a, "common common common common")  # the best bm25 of "common"
    shards = _read(_db(tmp_path), "SELECT count(*) FROM events_fts_shards")[0][0]
    assert isinstance(shards, int) and shards >= 10
    _agree(_db(tmp_path))
    found = (await actor.search("common", limit=50))["hits"]
    assert len(found) == 41
    scores = [h["score"] for h in found]
    assert scores == sorted(scores, reverse=True)
    assert found[0]["session_id"] == a and found[0]["seq"] == 21
    assert [h["seq"] for h in (await actor.search("common", limit=5))["hits"]][:1] == [21]
    # every event by its own word, whichever shard holds it
    for i in (1, 2, 17, 40):
        (hit,) = (await actor.search(f"uniq{i}x"))["hits"]
        assert hit["session_id"] == (a if i % 2 else b)
        assert f"«uniq{i}x»" in hit["snippet"]
    # the filters apply in every shard
    only_b = (await actor.search("common", session_id=b, limit=50))["hits"]
    assert len(only_b) == 20 and {h["session_id"] for h in only_b} == {b}
    window = (await actor.search("common", session_id=a, after_seq=3, before_seq=8))["hits"]
    assert sorted(h["seq"] for h in window) == [4, 5, 6, 7]
    assert (await actor.search("common", actions=["agent_message"]))["hits"] == []


async def test_a_delete_rewrites_only_its_shard_and_leaves_no_text(
    actor: AgentActor, tmp_path: Path
) -> None:
    sid = await actor.create_session()
    for i in range(1, 31):
        await _say(actor, sid, _text(i))
    db = _db(tmp_path)
    before = _shard_digests(db)
    assert len(before) >= 8
    events = await actor.load_events(sid)
    assert await actor.delete_events(sid, [events[14].id]) == 1  # uniq15x
    after = _shard_digests(db)
    changed = {s for s in before if before[s] != after.get(s)}
    assert len(changed) == 1  # only the shard that held it
    assert (await actor.search("uniq15x"))["hits"] == []
    _agree(db)
    data = db.read_bytes()
    wal = db.with_name("agent.sqlite-wal")
    data += wal.read_bytes() if wal.exists() else b""
    assert b"uniq15x" not in data and b"uniq16x" in data
    # a shard left empty is dropped with its tables
    conn = sqlite3.connect(db)
    try:
        (first,) = sorted(list_shards(conn), key=lambda s: s.first_rowid)[:1]
        rowids = [r[0] for r in conn.execute(f"SELECT rowid FROM {shard_table(first.shard)}")]
        ids = [
            r[0]
            for r in conn.execute(
                f"SELECT id FROM events WHERE rowid IN ({','.join('?' * len(rowids))})", rowids
            )
        ]
    finally:
        conn.close()
    assert await actor.delete_events(sid, ids) == len(ids)
    names = {r[0] for r in _read(db, "SELECT name FROM sqlite_master")}
    assert not any(str(n).startswith(shard_table(first.shard) + "_") for n in names)
    assert shard_table(first.shard) not in names
    _agree(db)
    # a session deleted: its shards go
    assert await actor.delete_session(sid)
    assert _read(db, "SELECT count(*) FROM events_fts_shards") == [(0,)]
    assert _shard_objects(db) == []


async def test_a_popped_events_rowid_reused_is_indexed_anew(
    actor: AgentActor, tmp_path: Path
) -> None:
    sid = await actor.create_session()
    for i in range(1, 13):
        await _say(actor, sid, _text(i))
    for _ in range(3):
        assert await actor.pop_event(sid) is not None
    await _say(actor, sid, "replacement words nine", "replacement words ten")
    _agree(_db(tmp_path))
    assert (await actor.search("uniq11x"))["hits"] == []
    assert len((await actor.search("replacement"))["hits"]) == 2


def _make_v8_file(tmp_path: Path, events: int) -> Path:
    """An agent file as version 8 wrote it: the single index ``events_fts``, holding every
    event, and a delete's merge still to do (``recall_purge``)."""
    db = _db(tmp_path)
    conn = old_agent_file(db, 8, [_text(i) for i in range(1, events + 1)])
    conn.execute("BEGIN")
    conn.execute("INSERT INTO events_fts(rowid, text) SELECT rowid, content FROM events")
    conn.execute("DELETE FROM recall_pending")
    conn.execute("DELETE FROM agent_settings WHERE key = 'recall_backfill'")
    conn.execute("INSERT INTO agent_settings(key, value) VALUES ('recall_purge', '1')")
    conn.execute("COMMIT")
    conn.close()
    return db


async def test_a_version_8_file_gets_shards_in_the_background(tmp_path: Path) -> None:
    db = _make_v8_file(tmp_path, 200)
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("agent")
        await actor.store()  # the migration, then the backfill
        await actor.recall_settled()
        found = await actor.search("uniq150x")
        assert found["indexing"] is False
        assert [h["seq"] for h in found["hits"]] == [150]
    names = names_now(db)
    assert "events_fts" not in names and "events_fts_data" not in names
    assert _read(db, "SELECT key FROM agent_settings WHERE key LIKE 'recall%'") == []
    assert _read(db, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    _agree(db)


async def test_a_restored_files_shards_are_replaced(actor: AgentActor, tmp_path: Path) -> None:
    sid = await actor.create_session()
    for i in range(1, 21):
        await _say(actor, sid, _text(i))
    await actor.close()
    staged = tmp_path / "staged.sqlite"
    shutil.copy(_db(tmp_path), staged)
    conn = sqlite3.connect(staged)
    try:  # a shard that lies: it indexes a word no event holds
        table = shard_table(list_shards(conn)[0].shard)
        conn.execute(f"INSERT INTO {table}(rowid, text) VALUES (999, 'planted')")
        conn.commit()
    finally:
        conn.close()
    assert check_agent_file(staged) == 1
    assert _read(staged, "SELECT count(*) FROM events_fts_shards") == [(0,)]
    assert _shard_objects(staged) == []
    assert b"planted" not in staged.read_bytes()


async def test_a_search_of_some_sessions_finds_what_the_search_of_all_does(
    actor: AgentActor,
) -> None:
    """A session's search reads only the shards its events may be in: the same hits as
    the agent's search narrowed to the session, for sessions written one after the
    other and side by side."""
    early = await actor.create_session()
    for i in range(1, 16):
        await _say(actor, early, _text(i))
    late, side = await actor.create_session(), await actor.create_session()
    for i in range(16, 46):
        await _say(actor, late if i % 3 else side, _text(i))
    everything = (await actor.search("common filler", limit=50))["hits"]
    assert len(everything) == 45
    for sid in (early, late, side):
        mine = [(h["session_id"], h["seq"]) for h in everything if h["session_id"] == sid]
        found = (await actor.search("common filler", session_id=sid, limit=50))["hits"]
        assert sorted((h["session_id"], h["seq"]) for h in found) == sorted(mine)
        one = await actor.search("common filler", session_id=sid, after_seq=2, before_seq=4)
        assert [h["seq"] for h in one["hits"]] == [3]
    (hit,) = (await actor.search("uniq5x", session_id=early))["hits"]
    assert hit["seq"] == 5
    assert (await actor.search("uniq5x", session_id=late))["hits"] == []
    empty = await actor.create_session()
    assert (await actor.search("common", session_id=empty))["hits"] == []
