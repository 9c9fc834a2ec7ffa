"""Zero-copy forks on real files: what a fork shares with its parent, deletes on either
side, a deleted parent's rows kept for its forks and erased (file and WAL bytes) when the
last one goes, search, export and import, and files of version 8 (forks that copied)."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from session_server import ActorRegistry, AgentActor
from session_server.runtime.transfer import export_session, import_session
from session_server.storage.schema import schema_sql
from session_server.storage.sqlite_open import _statements
from session_server.values.events import SessionEvent
from tests.support.old_schema import undo_to

AGENT = "agent"


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[ActorRegistry]:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        yield reg


@pytest.fixture
async def actor(registry: ActorRegistry) -> AgentActor:
    return await registry.get(AGENT)


def db(tmp_path: Path) -> Path:
    return tmp_path / "agents" / AGENT / "agent.sqlite"


async def say(actor: AgentActor, sid: str, *texts: str) -> None:
    await actor.append_events(sid, [SessionEvent(action="user_message", content=t) for t in texts])


async def contents(actor: AgentActor, sid: str) -> list[tuple[int, str]]:
    return [(e.seq, e.content) for e in await actor.load_events(sid, limit=None)]


def rows(tmp_path: Path, sql: str) -> list[tuple[object, ...]]:
    conn = sqlite3.connect(db(tmp_path))
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def file_bytes(tmp_path: Path) -> bytes:
    out = b""
    for suffix in ("", "-wal"):
        path = Path(f"{db(tmp_path)}{suffix}")
        if path.exists():
            out += path.read_bytes()
    return out


async def test_a_fork_writes_no_event_row(tmp_path: Path, actor: AgentActor) -> None:
    sid = await actor.create_session()
    await say(actor, sid, *[f"m{i}" for i in range(50)])
    before = rows(tmp_path, "SELECT count(*) FROM events")[0][0]
    fork = await actor.fork_session(sid, at_seq=30)
    deeper = await actor.fork_session(fork.session_id)
    assert rows(tmp_path, "SELECT count(*) FROM events")[0][0] == before == 50
    assert await contents(actor, deeper.session_id) == [(i + 1, f"m{i}") for i in range(30)]
    await say(actor, deeper.session_id, "own")
    assert (await contents(actor, deeper.session_id))[-1] == (31, "own")
    assert len(await contents(actor, fork.session_id)) == 30
    assert len(await contents(actor, sid)) == 50


async def test_deletes_on_one_side_never_show_on_the_other(actor: AgentActor) -> None:
    sid = await actor.create_session()
    await say(actor, sid, "a", "b", "c")
    fork = (await actor.fork_session(sid)).session_id
    parent_events = await actor.load_events(sid, limit=None)
    assert await actor.delete_events(sid, [parent_events[0].id]) == 1  # the fork reads it
    assert await contents(actor, sid) == [(2, "b"), (3, "c")]
    assert await contents(actor, fork) == [(1, "a"), (2, "b"), (3, "c")]
    assert await actor.delete_events(fork, [parent_events[2].id]) == 1  # inherited
    assert await contents(actor, fork) == [(1, "a"), (2, "b")]
    assert await contents(actor, sid) == [(2, "b"), (3, "c")]
    popped = await actor.pop_event(fork, replace_with=SessionEvent(content="B"))
    assert popped is not None and popped.content == "b"
    assert await contents(actor, fork) == [(1, "a"), (2, "B")]
    assert await contents(actor, sid) == [(2, "b"), (3, "c")]
    await actor.clear_session(sid)
    assert await contents(actor, sid) == []
    assert await contents(actor, fork) == [(1, "a"), (2, "B")]


async def test_a_deleted_parent_stays_for_its_forks_then_is_erased(
    tmp_path: Path, actor: AgentActor
) -> None:
    sid = await actor.create_session()
    await say(actor, sid, "zebra-secret-1", "zebra-secret-2", "zebra-tail-3")
    first = (await actor.fork_session(sid, at_seq=2)).session_id
    second = (await actor.fork_session(first, at_seq=1)).session_id
    assert await actor.delete_session(sid)
    assert await contents(actor, first) == [(1, "zebra-secret-1"), (2, "zebra-secret-2")]
    assert await contents(actor, second) == [(1, "zebra-secret-1")]
    # what no fork reads went at once
    assert b"zebra-tail-3" not in file_bytes(tmp_path)
    # a new session under the deleted id starts empty
    assert await actor.create_session(session_id=sid) == sid
    await say(actor, sid, "fresh")
    assert await contents(actor, sid) == [(1, "fresh")]
    assert await actor.delete_session(first)
    assert await contents(actor, second) == [(1, "zebra-secret-1")]
    assert b"zebra-secret-2" not in file_bytes(tmp_path)
    assert await actor.delete_session(second)
    await actor.mirror_settled()
    assert b"zebra-secret" not in file_bytes(tmp_path)
    assert rows(tmp_path, "SELECT count(*) FROM lineage") == [(0,)]
    assert rows(tmp_path, "SELECT session_id FROM events") == [(sid,)]


async def test_a_rewind_moves_no_row_and_its_branch_reads_the_tail(
    tmp_path: Path, actor: AgentActor
) -> None:
    sid = await actor.create_session()
    await say(actor, sid, "one", "two", "three")
    ids = rows(tmp_path, "SELECT id, session_id FROM events ORDER BY seq")
    result = await actor.rewind_session(sid, 1)
    assert rows(tmp_path, "SELECT id, session_id FROM events ORDER BY seq") == ids
    assert result.branch_session_id is not None
    assert await contents(actor, sid) == [(1, "one")]
    assert await contents(actor, result.branch_session_id) == [(1, "one"), (2, "two"), (3, "three")]
    await say(actor, sid, "four")
    assert await contents(actor, sid) == [(1, "one"), (5, "four")]
    # the branch is the last reader of the abandoned rows
    assert await actor.delete_session(result.branch_session_id)
    assert b"three" not in file_bytes(tmp_path)
    assert await contents(actor, sid) == [(1, "one"), (5, "four")]


async def test_search_finds_inherited_events_on_the_fork_and_reports_a_row_once(
    actor: AgentActor,
) -> None:
    sid = await actor.create_session()
    await say(actor, sid, "the walrus sings", "later words")
    fork = (await actor.fork_session(sid, at_seq=1)).session_id
    back = await actor.rewind_session(sid, 0)
    await actor.recall_settled()
    on_fork = (await actor.search("walrus", session_id=fork))["hits"]
    assert [(h["session_id"], h["seq"]) for h in on_fork] == [(fork, 1)]
    assert (await actor.search("walrus", session_id=sid))["hits"] == []  # rewound away
    branch = back.branch_session_id
    assert branch is not None
    every = (await actor.search("walrus"))["hits"]
    assert len(every) == 1 and every[0]["session_id"] in (fork, branch)
    later = (await actor.search("later", session_id=branch))["hits"]
    assert [(h["session_id"], h["seq"]) for h in later] == [(branch, 2)]
    assert (await actor.search("later", session_id=fork))["hits"] == []


async def test_export_of_a_fork_is_self_contained_and_import_restores_it(
    tmp_path: Path, actor: AgentActor
) -> None:
    sid = await actor.create_session()
    await say(actor, sid, "p1", "p2", "p3")
    fork = (await actor.fork_session(sid, at_seq=2)).session_id
    await say(actor, fork, "f3")
    await export_session(actor, fork, tmp_path / "out")
    async with ActorRegistry(tmp_path / "other", idle_timeout=None) as reg:
        other = await reg.get("b")
        await import_session(other, tmp_path / "out" / "agents" / AGENT)
        assert await contents(other, fork) == [(1, "p1"), (2, "p2"), (3, "f3")]
        row = await other.get_session(fork)
        assert row is not None
        assert (row["parent_session_id"], row["fork_seq"]) == (sid, 2)


async def test_a_version_8_file_with_a_copied_fork_reads_as_before(tmp_path: Path) -> None:
    path = db(tmp_path)
    path.parent.mkdir(parents=True)
    conn = sqlite3.connect(path)
    for statement in [*_statements(schema_sql()), *undo_to(8)]:
        conn.execute(statement)
    conn.execute("PRAGMA user_version=8")
    conn.commit()  # the undo's last statements opened a transaction
    conn.execute("BEGIN")
    for sid, parent in (("p", None), ("f", "p")):
        conn.execute(
            "INSERT INTO sessions(id, agent_id, created_at, updated_at, last_seq, last_turn,"
            " last_turn_start_seq, parent_session_id, fork_seq, fork_kind)"
            " VALUES (?, ?, 1, 1, 2, 2, 2, ?, ?, ?)",
            (sid, AGENT, parent, 2 if parent else None, "fork" if parent else None),
        )
        conn.executemany(
            "INSERT INTO events(id, session_id, seq, action, content, created_at, turn,"
            " turn_start_seq) VALUES (?, ?, ?, 'user_message', ?, 1, ?, ?)",
            [(f"{sid}{i}", sid, i, f"m{i}", i, i) for i in (1, 2)],
        )
    conn.execute("COMMIT")
    conn.close()
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get(AGENT)
        assert await contents(actor, "f") == [(1, "m1"), (2, "m2")]
        assert await actor.delete_session("p")
        assert await contents(actor, "f") == [(1, "m1"), (2, "m2")]
        deeper = (await actor.fork_session("f", at_seq=1)).session_id
        assert await contents(actor, deeper) == [(1, "m1")]


def test_ordered_reads_through_a_lineage_merge_the_index_ranges() -> None:
    """A read of a session with lineage, ordered by seq, walks each segment's index range
    in order and never sorts (a sort would read every row of a long history)."""
    from session_server.storage.lineage_sql import events_source, write_lineage
    from session_server.values.lineage import OPEN, Segment

    conn = sqlite3.connect(":memory:")
    for statement in _statements(schema_sql()):
        conn.execute(statement)
    write_lineage(conn, "f", [Segment(0, 10, "p"), Segment(11, 20, "q"), Segment(21, OPEN, "f")])
    src, pre = events_source(conn, "f")
    for sql, args in (
        (f"SELECT turn, turn_start_seq, seq FROM {src} WHERE session_id = ? AND seq <= ?"
         " AND action = 'user_message' ORDER BY seq DESC LIMIT 1", ("f", 5)),
        (f"SELECT action, turn_start_seq, seq FROM {src} WHERE session_id = ? AND seq > ?"
         " AND action != 'compaction' ORDER BY seq LIMIT 1", ("f", 5)),
        (f"SELECT id, seq FROM {src} WHERE session_id = ? ORDER BY seq DESC LIMIT 3", ("f",)),
    ):  # fmt: skip
        plan = " | ".join(r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}", (*pre, *args)))
        assert "MERGE (UNION ALL)" in plan and "TEMP B-TREE" not in plan, plan
    conn.close()
