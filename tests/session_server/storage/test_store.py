"""The SQLite store through the actor: sessions, appends, loads, deletes (real files)."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from session_server import ActorRegistry, AgentActor
from session_server.storage import sqlite_ops
from session_server.storage.schema import SCHEMA_VERSION
from session_server.values.codec import message_to_event
from session_server.values.errors import ConflictError, InvalidParamsError, NotFoundError
from session_server.values.events import ContextMessage, SessionEvent, ToolCall
from session_server.values.turns import assign_turns


def user(sid: str, text: str) -> SessionEvent:
    return message_to_event(sid, ContextMessage(role="user", content=text))


def assistant(sid: str, text: str) -> SessionEvent:
    return message_to_event(sid, ContextMessage(role="assistant", content=text))


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[ActorRegistry]:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        yield reg


@pytest.fixture
async def actor(registry: ActorRegistry) -> AgentActor:
    return await registry.get("agent-1")


async def test_file_layout_schema_version_and_pragmas(
    registry: ActorRegistry, tmp_path: Path
) -> None:
    actor = await registry.get("db manager_db manager_1393")
    await actor.create_session()
    path = tmp_path / "agents" / "db manager_db manager_1393" / "agent.sqlite"
    assert path.is_file()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"sessions", "events", "idempotency", "tool_calls"} <= tables
    finally:
        conn.close()
    store = await actor.store()
    assert store.writer.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert store.writer.execute("PRAGMA busy_timeout").fetchone()[0] == 5000


async def test_synchronous_normal_is_selectable(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, synchronous="NORMAL") as reg:
        actor = await reg.get("a")
        await actor.create_session()
        store = await actor.store()
        assert store.writer.execute("PRAGMA synchronous").fetchone()[0] == 1
    with pytest.raises(ValueError, match="synchronous"):
        ActorRegistry(tmp_path, synchronous="OFF")  # type: ignore[arg-type]


async def test_reopening_an_existing_file_keeps_data(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path) as reg:
        actor = await reg.get("a")
        sid = await actor.create_session({"k": "v"})
        await actor.append_events(sid, [user(sid, "hello")])
    async with ActorRegistry(tmp_path) as reg:
        actor = await reg.get("a")
        session = await actor.get_session(sid)
        assert session is not None and session["metadata"] == {"k": "v"}
        assert [e.content for e in await actor.load_events(sid)] == ["hello"]


async def test_session_crud_and_ordering(
    actor: AgentActor, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every write a millisecond after the last: two writes in one millisecond would tie
    # on updated_at, and the order asserted below would then follow created_at instead.
    monkeypatch.setattr(sqlite_ops, "now_ms", itertools.count(1_700_000_000_000).__next__)
    s1 = await actor.create_session({"name": "first"})
    s2 = await actor.create_session(session_id="chosen-id")
    assert s2 == "chosen-id"
    with pytest.raises(ConflictError, match="session_id"):
        await actor.create_session(session_id="chosen-id")
    got = await actor.get_session(s1)
    assert got is not None and got["metadata"] == {"name": "first"} and got["last_seq"] == 0
    assert await actor.get_session("nope") is None
    # list: newest updated_at first; appending moves updated_at
    await actor.append_events(s1, [user(s1, "x")])
    ids = [s["id"] for s in await actor.list_sessions()]
    assert ids == [s1, s2]
    before = (await actor.get_session(s2)) or {}
    await actor.append_events(s2, [user(s2, "y")])
    after = (await actor.get_session(s2)) or {}
    assert after["updated_at"] > before["updated_at"]
    assert (await actor.list_sessions())[0]["id"] == s2


async def test_delete_session_removes_its_events(actor: AgentActor) -> None:
    s1 = await actor.create_session()
    s2 = await actor.create_session()
    await actor.append_events(s1, [user(s1, "a"), assistant(s1, "b")])
    await actor.append_events(s2, [user(s2, "keep")])
    assert await actor.delete_session(s1) is True
    assert await actor.delete_session(s1) is False
    assert await actor.get_session(s1) is None
    assert await actor.load_events(s1) == []
    assert [e.content for e in await actor.load_events(s2)] == ["keep"]


async def test_seq_starts_at_one_and_ignores_caller_fields(actor: AgentActor) -> None:
    sid = await actor.create_session()
    ev = SessionEvent(session_id="someone-else", seq=99, action="user_message", content="hi")
    result = await actor.append_events(sid, [ev, assistant(sid, "yo")])
    assert result.seqs == [1, 2] and result.last_seq == 2
    stored = await actor.load_events(sid)
    assert [e.seq for e in stored] == [1, 2]
    assert all(e.session_id == sid for e in stored)
    assert stored[0].id  # assigned by the store
    assert stored[0].timestamp > 0


async def test_seq_never_reused_after_deleting_newest(actor: AgentActor) -> None:
    sid = await actor.create_session()
    await actor.append_events(sid, [user(sid, str(i)) for i in range(3)])
    newest = (await actor.load_events(sid))[-1]
    assert await actor.delete_events(sid, [newest.id]) == 1
    result = await actor.append_events(sid, [user(sid, "next")])
    assert result.seqs == [4]


async def test_unknown_session_is_not_found_except_empty_list(actor: AgentActor) -> None:
    with pytest.raises(NotFoundError, match="session_id"):
        await actor.append_events("missing", [user("missing", "x")])
    result = await actor.append_events("missing", [])
    assert result.seqs == [] and result.last_seq == 0


async def test_append_is_all_or_nothing(actor: AgentActor) -> None:
    sid = await actor.create_session()
    first = user(sid, "one")
    await actor.append_events(sid, [first])
    duplicate = SessionEvent(id=first.id, action="user_message", content="dup")
    with pytest.raises(ConflictError, match="already exists"):
        await actor.append_events(sid, [user(sid, "two"), duplicate])
    assert [e.content for e in await actor.load_events(sid)] == ["one"]
    # an invalid event anywhere in the batch: nothing written, field named
    bad = SessionEvent(action="tool_result", content="r")  # no tool_call_id
    with pytest.raises(InvalidParamsError, match=r"events\[1\]\.tool_call_id"):
        await actor.append_events(sid, [user(sid, "three"), bad])
    not_str = SessionEvent(action="user_message", content=5)  # type: ignore[arg-type]
    with pytest.raises(InvalidParamsError, match=r"events\[0\]\.content"):
        await actor.append_events(sid, [not_str])
    assert [e.seq for e in await actor.load_events(sid)] == [1]
    assert (await actor.append_events(sid, [user(sid, "four")])).seqs == [2]


async def test_tool_arguments_are_stored_as_sent(actor: AgentActor) -> None:
    sid = await actor.create_session()
    sent: list[Any] = ['{"city": "Par', [1], 7, {"a": None}]
    calls = [ToolCall(id=f"c{i}", name="f", arguments=a) for i, a in enumerate(sent)]
    await actor.append_events(sid, [SessionEvent(action="tool_call_request", tool_calls=calls)])
    (stored,) = await actor.load_events(sid)
    assert [c.arguments for c in stored.tool_calls or ()] == sent


async def test_load_events_filters_limits_and_order(actor: AgentActor) -> None:
    sid = await actor.create_session()
    events = []
    for i in range(10):
        ev = user(sid, f"u{i}") if i % 2 == 0 else assistant(sid, f"a{i}")
        events.append(SessionEvent(**{**_fields(ev), "timestamp": 1000 + i}))
    await actor.append_events(sid, events)
    assert [e.seq for e in await actor.load_events(sid, limit=3)] == [8, 9, 10]
    assert [e.seq for e in await actor.load_events(sid, limit=3, tail=False)] == [1, 2, 3]
    assert [e.seq for e in await actor.load_events(sid, since=1007)] == [8, 9, 10]
    assert [e.seq for e in await actor.load_events(sid, after_seq=8)] == [9, 10]
    only_users = await actor.load_events(sid, actions=["user_message"], limit=2)
    assert [e.seq for e in only_users] == [7, 9]  # filter applied before the limit
    assert len(await actor.load_events(sid)) == 10  # default limit 50
    with pytest.raises(InvalidParamsError, match="actions"):
        await actor.load_events(sid, actions=["bogus"])


async def test_load_events_default_limit_is_50(actor: AgentActor) -> None:
    sid = await actor.create_session()
    await actor.append_events(sid, [user(sid, str(i)) for i in range(60)])
    loaded = await actor.load_events(sid)
    assert len(loaded) == 50 and loaded[0].seq == 11 and loaded[-1].seq == 60


async def test_delete_events_only_touches_that_session(actor: AgentActor) -> None:
    s1 = await actor.create_session()
    s2 = await actor.create_session()
    await actor.append_events(s1, [user(s1, "a")])
    await actor.append_events(s2, [user(s2, "b")])
    other = (await actor.load_events(s2))[0]
    mine = (await actor.load_events(s1))[0]
    assert await actor.delete_events(s1, [other.id, "unknown-id", mine.id]) == 1
    assert await actor.load_events(s1) == []
    assert len(await actor.load_events(s2)) == 1
    assert await actor.delete_events(s1, []) == 0


async def test_turn_numbers_and_late_tool_results(actor: AgentActor) -> None:
    sid = await actor.create_session()
    call = message_to_event(
        sid,
        ContextMessage(role="assistant", tool_calls=[ToolCall(id="c1", name="slow", arguments={})]),
    )
    await actor.append_events(sid, [user(sid, "q1"), call])
    await actor.append_events(sid, [user(sid, "q2")])
    late = message_to_event(
        sid, ContextMessage(role="tool", tool_call_id="c1", name="slow", content="done")
    )
    await actor.append_events(sid, [late])
    events = await actor.load_events(sid)
    assert [(e.action, e.turn) for e in events] == [
        ("user_message", 1),
        ("tool_call_request", 1),
        ("user_message", 2),
        ("tool_result", 1),
    ]
    assert all(e.token_count and e.token_count > 0 for e in events)


async def test_a_reused_call_id_joins_its_latest_calls_turn_across_appends(
    actor: AgentActor,
) -> None:
    """A provider reusing ``call_1``: a result in a later append joins the latest call's
    turn (``values.turns.number_turns``), not the first one's."""
    sid = await actor.create_session()

    def call() -> SessionEvent:
        tc = ToolCall(id="call_1", name="t", arguments={})
        return SessionEvent(action="tool_call_request", tool_calls=[tc])

    def result(text: str) -> SessionEvent:
        return SessionEvent(action="tool_result", tool_call_id="call_1", content=text)

    await actor.append_events(sid, [user(sid, "q1"), call(), result("r1")])
    await actor.append_events(sid, [user(sid, "q2"), call()])
    await actor.append_events(sid, [result("r2")])
    events = await actor.load_events(sid, limit=None)
    assert [e.turn for e in events] == [1, 1, 1, 2, 2, 2]
    assert [e.turn for e in events] == assign_turns(events)[0]


def _fields(ev: SessionEvent) -> dict[str, object]:
    return {f: getattr(ev, f) for f in ev.__struct_fields__}
