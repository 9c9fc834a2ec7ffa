"""The actor's caches against the SQLite truth (regressions from an independent review).

Some tests gate a store method (the real method runs, then waits) to force a timing that
happens naturally under load: a read that returns after a write committed.
"""

from __future__ import annotations

import asyncio
import json
import random
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from session_server import ActorRegistry
from session_server.storage.store import AgentStore
from session_server.values.context import WorkingContext
from session_server.values.errors import (
    AgentUnavailableError,
    ConflictError,
    NotFoundError,
    StorageError,
)
from session_server.values.events import ContextMessage, SessionEvent, ToolCall
from session_server.values.plans import AppendBatch, AppendOutcome
from tests.support.waiting import until

COMPACT = {"mode": "compact", "compact_keep": 1, "compact_trigger_turns": 1}


def chat(n: int) -> list[ContextMessage]:
    return [
        ContextMessage(role="user", content=f"q{n}"),
        ContextMessage(role="assistant", content=f"a{n}"),
    ]


def tool_turns(ctx: WorkingContext, n: int = 4) -> None:
    for i in range(n):
        ctx.add_message(ContextMessage(role="user", content=f"q{i}"))
        call = ToolCall(id=f"c{i}", name="t", arguments={"x": i})
        ctx.add_message(ContextMessage(role="assistant", tool_calls=[call]))
        ctx.add_message(
            ContextMessage(role="tool", tool_call_id=f"c{i}", name="t", content="BIG " * 50)
        )


async def first_build(memory_dir: Path, sid: str) -> WorkingContext:
    async with ActorRegistry(memory_dir, idle_timeout=None) as reg:
        return await (await reg.get("agent")).build_working_context(sid)


# -- the snapshot cache ------------------------------------------------------------------


async def test_snapshot_restore_is_used_and_equals_a_rebuild(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("agent")
        sid = await actor.create_session()
        for n in range(3):
            ctx = await actor.build_working_context(sid)
            ctx.add_messages(chat(n))
            await actor.persist_working_context(sid, ctx)
        rebuilt = await actor.build_working_context(sid, limit=1000)
    restored = await first_build(tmp_path, sid)
    assert restored.metadata.get("restored_from") == "working_context_snapshot.json"
    assert restored.base_seq == rebuilt.base_seq
    assert msgspec.to_builtins(restored.messages) == msgspec.to_builtins(rebuilt.messages)


async def test_a_corrupt_snapshot_is_ignored(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("agent")
        sid = await actor.create_session()
        ctx = await actor.build_working_context(sid)
        ctx.add_messages(chat(1))
        await actor.persist_working_context(sid, ctx)
    snapshot = tmp_path / "agents" / "agent" / "sessions" / sid / "working_context_snapshot.json"
    snapshot.write_text('{"schema_version": "one", "messages": 7')
    restored = await first_build(tmp_path, sid)
    assert "restored_from" not in restored.metadata
    assert [m.content for m in restored.messages] == ["q1", "a1"]


async def test_turn_persisted_with_a_bare_context_keeps_full_history(tmp_path: Path) -> None:
    """turn.persist over RPC persists a context holding only the new turn."""
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("agent")
        sid = await actor.create_session()
        for n in range(3):
            bare = WorkingContext()
            bare.add_messages(chat(n))
            await actor.persist_working_context(sid, bare)
    restored = await first_build(tmp_path, sid)
    assert [m.content for m in restored.messages] == ["q0", "a0", "q1", "a1", "q2", "a2"]


async def test_snapshot_includes_another_writers_turn(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("agent")
        sid = await actor.create_session()
        ctx = await actor.build_working_context(sid)
        other = await actor.build_working_context(sid, limit=10)
        other.add_messages(chat(1))
        await actor.persist_working_context(sid, other)
        ctx.add_messages(chat(2))
        await actor.persist_working_context(sid, ctx)  # on_conflict="append"
    assert [m.content for m in (await first_build(tmp_path, sid)).messages] == [
        "q1",
        "a1",
        "q2",
        "a2",
    ]


async def test_deleted_events_do_not_come_back(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("agent")
        sid = await actor.create_session()
        ctx = await actor.build_working_context(sid)
        ctx.add_messages([*chat(1), ContextMessage(role="user", content="SECRET")])
        await actor.persist_working_context(sid, ctx)
        secret = [e.id for e in await actor.load_events(sid) if e.content == "SECRET"]
        assert await actor.delete_events(sid, secret) == 1
    assert "SECRET" not in [m.content for m in (await first_build(tmp_path, sid)).messages]


async def test_a_failed_wal_erase_after_a_delete_still_drops_what_was_deleted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The WAL erase after a committed delete fails (an I/O error, injected after the real
    checkpoint ran): the delete stands, is answered, and its events are gone from the
    actor's cache and the mirror, not served by the next build (the error used to skip
    all of that)."""

    async def failing_erase(store: AgentStore) -> None:
        await real_erase(store)
        raise StorageError("checkpoint after delete failed: disk I/O error")

    real_erase = AgentStore.erase_wal
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("agent")
        sid, gone = await actor.create_session(), await actor.create_session()
        for target in (sid, gone):
            ctx = await actor.build_working_context(target)
            ctx.add_messages([*chat(1), ContextMessage(role="user", content="SECRET")])
            await actor.persist_working_context(target, ctx)
        assert "SECRET" in [m.content for m in (await actor.build_working_context(sid)).messages]
        await actor.mirror.drain()
        assert actor.mirror.session_dir(gone).exists()
        secret = [e.id for e in await actor.load_events(sid) if e.content == "SECRET"]
        monkeypatch.setattr(AgentStore, "erase_wal", failing_erase)
        with caplog.at_level("WARNING", logger="session_server.storage.store"):
            assert await actor.delete_events(sid, secret) == 1
            assert await actor.delete_session(gone) is True
        messages = [m.content for m in (await actor.build_working_context(sid)).messages]
        assert messages == ["q1", "a1"]
        with pytest.raises(NotFoundError):
            await actor.build_working_context(gone)
        assert not actor.mirror.session_dir(gone).exists()
        await actor.mirror.drain()
        lines = [f.read_text() for f in actor.mirror.session_dir(sid).glob("*.jsonl")]
        assert lines and not any("SECRET" in text for text in lines)
    assert sum("WAL not erased" in r.getMessage() for r in caplog.records) == 2


async def test_a_strategy_set_after_the_last_turn_applies(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("agent")
        sid = await actor.create_session()
        ctx = await actor.build_working_context(sid)
        tool_turns(ctx)
        await actor.persist_working_context(sid, ctx)
        await actor.set_strategy(COMPACT, sid)
    assert any(m.compacted for m in (await first_build(tmp_path, sid)).messages)


# -- races between caches and commits ----------------------------------------------------


def gate(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> tuple[dict[str, bool], asyncio.Event, asyncio.Event]:
    """Make ``AgentStore.<name>`` pause after reading, once, while armed."""
    original: Callable[..., Awaitable[Any]] = getattr(AgentStore, name)
    entered, release = asyncio.Event(), asyncio.Event()
    armed = {"on": False}

    async def gated(self: AgentStore, *args: Any, **kwargs: Any) -> Any:
        result = await original(self, *args, **kwargs)
        if armed["on"]:
            armed["on"] = False
            entered.set()
            await release.wait()
        return result

    monkeypatch.setattr(AgentStore, name, gated)
    return armed, entered, release


async def test_session_strategy_set_during_a_cache_seed_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None, mirror=False) as reg:
        actor = await reg.get("agent")
        sid = await actor.create_session()
        ctx = await actor.build_working_context(sid, limit=50)
        tool_turns(ctx)
        await actor.persist_working_context(sid, ctx)
        actor.core.events_deleted(sid)  # a cold cache, as after a delete
        armed, entered, release = gate(monkeypatch, "context_window")
        armed["on"] = True
        build = asyncio.ensure_future(actor.build_working_context(sid, limit=50))
        await entered.wait()  # the read saw no strategy
        await actor.set_strategy(COMPACT, sid)
        release.set()
        await build
        after = await actor.build_working_context(sid, limit=50)
        assert any(m.compacted for m in after.messages)


async def test_agent_strategy_set_during_its_first_load_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None, mirror=False) as reg:
        actor = await reg.get("agent")
        await actor.list_sessions()
        armed, entered, release = gate(monkeypatch, "get_setting")
        armed["on"] = True
        reader = asyncio.ensure_future(actor.get_strategy())
        await entered.wait()
        await actor.set_strategy(COMPACT)
        release.set()
        await reader
        assert (await actor.get_strategy())["agent"] == COMPACT


async def test_a_cancelled_build_acts_on_pressure_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None, mirror=False) as reg:
        actor = await reg.get("agent")
        sid = await actor.create_session()
        await actor.set_strategy({"mode": "summarize", "raw_tail_turns": 1}, sid)
        for i in range(6):
            ctx = await actor.build_working_context(sid)
            ctx.add_messages(chat(i))
            # Long enough that a summary gains something (a futile one is not written).
            ctx.add_message(ContextMessage(role="assistant", content="detail " * 200))
            await actor.persist_working_context(sid, ctx)
        original = AgentStore.append
        entered, release = asyncio.Event(), asyncio.Event()

        async def slow_append(self: AgentStore, batch: AppendBatch) -> AppendOutcome:
            if any(e.action == "compaction" for e in batch.events):
                entered.set()
                await release.wait()  # a slow fsync
            return await original(self, batch)

        monkeypatch.setattr(AgentStore, "append", slow_append)
        ctx = await actor.build_working_context(sid)
        ctx.add_messages(chat(99))
        result = await actor.persist_working_context(sid, ctx, usage={"prompt_tokens": 10**7})
        assert result.compaction_required
        # The persist started the summary in the background; builds join it.
        first = asyncio.ensure_future(actor.build_working_context(sid))
        await entered.wait()
        first.cancel()  # e.g. the caller's timeout
        joined = asyncio.Event()
        join = actor.compactions.summary

        async def joining(pump: Any, due: Any) -> Any:
            joined.set()  # the summary's own first step follows in this step
            return await join(pump, due)

        monkeypatch.setattr(actor.compactions, "summary", joining)
        second = asyncio.ensure_future(actor.build_working_context(sid))
        await asyncio.wait_for(joined.wait(), timeout=30)  # a guard against a hang only
        assert not second.done(), "the second build waits for the summary in flight"
        release.set()
        await asyncio.gather(first, second, return_exceptions=True)
        assert len(await actor.load_events(sid, limit=None, actions=["compaction"])) == 1


# -- lifecycle -------------------------------------------------------------------------------


async def test_close_waits_for_a_read_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    armed, entered, release = gate(monkeypatch, "list_sessions")
    reg = ActorRegistry(tmp_path, idle_timeout=None, mirror=False)
    actor = await reg.get("agent")
    await actor.list_sessions()  # an activity ended: the actor's idle event is set
    await actor.recall_settled()  # and the activation's search-index check too
    assert actor._idle.is_set()
    armed["on"] = True
    read = asyncio.ensure_future(actor.list_sessions())
    await entered.wait()
    closing = asyncio.ensure_future(reg.close())
    # Only ``close`` clears the idle event, when it finds an activity in flight and
    # waits for it to end.
    await until(lambda: not actor._idle.is_set(), "the close to wait for the read")
    assert not closing.done() and actor.is_open
    release.set()
    await read
    await closing
    assert not actor.is_open


async def test_open_stores_stay_bounded_under_concurrent_reads(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None, max_open=2, mirror=False) as reg:
        actors = [await reg.get(f"a{i}") for i in range(8)]
        for a in actors:
            await a.create_session(session_id="s")
        rnd = random.Random(1)

        async def reader() -> None:
            for _ in range(40):
                await rnd.choice(actors).get_session("s")

        await asyncio.gather(*(reader() for _ in range(16)))
        await reg.settle()
        open_ids = [a.agent_id for a in actors if a.is_open]
        assert all(reg.is_tracked(a) for a in actors if a.is_open)  # every open store tracked
        assert len(open_ids) <= reg.max_open


async def test_mirror_cursor_is_stored_after_activation_repair(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("agent")
        sid = await actor.create_session()
        ctx = await actor.build_working_context(sid)
        ctx.add_messages(chat(1))
        await actor.persist_working_context(sid, ctx)
    db = tmp_path / "agents" / "agent" / "agent.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE sessions SET mirror_seq = 0")  # as a crash leaves it
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        await (await reg.get("agent")).list_sessions()  # activation verifies the mirror
    with sqlite3.connect(db) as conn:
        mirror_seq, last_seq = conn.execute("SELECT mirror_seq, last_seq FROM sessions").fetchone()
    assert mirror_seq == last_seq == 2


async def test_a_second_process_cannot_open_an_agent_in_use(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as server:
        actor = await server.get("agent")
        await actor.create_session()
        async with ActorRegistry(tmp_path, idle_timeout=None) as other:
            with pytest.raises(AgentUnavailableError, match="open in another process"):
                await (await other.get("agent")).list_sessions()
        await actor.hibernate()  # released while hibernated: then the other may open it
        async with ActorRegistry(tmp_path, idle_timeout=None) as other:
            assert len(await (await other.get("agent")).list_sessions()) == 1


async def test_import_is_one_transaction(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("agent")
        dup = SessionEvent(id="same", action="user_message", content="x")
        with pytest.raises(ConflictError):
            await actor.import_events([dup, dup], session_id="imp")
        assert await actor.list_sessions() == []
        sid, result = await actor.import_events([dup], session_id="imp", metadata={"k": 1})
        assert sid == "imp" and result.seqs == [1]
        session = await actor.get_session("imp")
        assert session is not None and session["metadata"] == {"k": 1}
    snapshot_file = tmp_path / "agents" / "agent" / "sessions" / "imp" / "raw_traces.jsonl"
    assert json.loads(snapshot_file.read_text().splitlines()[0])["content"] == "x"
