"""The end-of-turn snapshot: the cache is checked once per mirror flush, not per turn."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from session_server import ActorRegistry
from session_server.core.agent_core import AgentCore
from session_server.core.context import WorkingContext
from session_server.core.events import ContextMessage
from session_server.mirror import SNAPSHOT_FILE


def turn(n: int) -> list[ContextMessage]:
    return [
        ContextMessage(role="user", content=f"question {n}"),
        ContextMessage(role="assistant", content=f"answer {n}"),
    ]


async def test_turns_between_two_flushes_check_the_cache_once_and_the_last_one_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checks: list[str] = []
    original = AgentCore.cached_view

    def recording(self: AgentCore, session_id: str, limit: int) -> Any:
        checks.append(session_id)
        return original(self, session_id, limit)

    monkeypatch.setattr(AgentCore, "cached_view", recording)
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("agent")
        actor.mirror.delay = 3600.0  # flushes only when drained, below
        sid = await actor.create_session()
        path = actor.mirror.session_dir(sid) / SNAPSHOT_FILE
        for flush in range(2):
            checks.clear()
            for n in range(5):
                ctx = WorkingContext()
                ctx.add_messages(turn(10 * flush + n))
                last = await actor.persist_working_context(sid, ctx)
            assert checks == [sid]  # the first turn since the last flush, only
            await actor.mirror.drain()
            assert json.loads(path.read_text(encoding="utf-8"))["last_seq"] == last.last_seq


async def test_a_session_the_cache_let_go_gets_its_snapshot_after_the_next_turn(
    tmp_path: Path,
) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("agent")
        actor.mirror.delay = 3600.0
        sid = await actor.create_session()
        path = actor.mirror.session_dir(sid) / SNAPSHOT_FILE
        for n in range(2):
            ctx = WorkingContext()
            ctx.add_messages(turn(n))
            await actor.persist_working_context(sid, ctx)
        actor.core._recent.forget(sid)  # the cache lets the session go before the flush
        await actor.mirror.drain()
        assert not path.exists()  # that flush could not render it: nothing written
        ctx = WorkingContext()
        ctx.add_messages(turn(2))
        last = await actor.persist_working_context(sid, ctx)  # checks and reads the window
        await actor.mirror.drain()
        assert json.loads(path.read_text(encoding="utf-8"))["last_seq"] == last.last_seq


async def test_quick_turns_share_one_snapshot_per_interval_and_drain_writes_the_held_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot is a cache: a session's is rendered at most once per
    ``snapshot_interval``; turns in quicker succession share one, the held one is written
    when the interval has passed (no drain), and ``drain`` writes a held one at once."""
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("agent")
        mirror = actor.mirror
        mirror.delay = 0.001
        written: list[int] = []
        wrote = asyncio.Event()
        original = mirror.writer.write_snapshot

        def recording(session_id: str, **kw: Any) -> Any:
            digest = original(session_id, **kw)
            written.append(kw["last_seq"])
            actor_loop.call_soon_threadsafe(wrote.set)
            return digest

        actor_loop = asyncio.get_running_loop()
        monkeypatch.setattr(mirror.writer, "write_snapshot", recording)
        traced: list[int | None] = []
        traced_event = asyncio.Event()
        append = mirror.writer.append

        def tracing(session_id: str, events: Any) -> int | None:
            cursor = append(session_id, events)
            traced.append(cursor)
            actor_loop.call_soon_threadsafe(traced_event.set)
            return cursor

        monkeypatch.setattr(mirror.writer, "append", tracing)
        sid = await actor.create_session()
        path = mirror.session_dir(sid) / SNAPSHOT_FILE

        async def persist(n: int) -> int:
            ctx = WorkingContext()
            ctx.add_messages(turn(n))
            return (await actor.persist_working_context(sid, ctx)).last_seq

        mirror.snapshot_interval = 3600.0  # nothing after the first, until drained
        first = await persist(0)
        await asyncio.wait_for(wrote.wait(), 10)  # the first snapshot of the session
        assert written == [first]
        seqs = [await persist(n) for n in range(1, 6)]
        # Trace lines are not held with the snapshot: they reach the files within `delay`.
        while seqs[-1] not in traced:
            traced_event.clear()
            await asyncio.wait_for(traced_event.wait(), 10)
        assert written == [first]  # held: rendered at most once per interval
        await mirror.drain()
        assert written == [first, seqs[-1]]
        assert json.loads(path.read_text(encoding="utf-8"))["last_seq"] == seqs[-1]
        # With a short interval the held snapshot is written by the timer, without a drain.
        mirror.snapshot_interval = 0.05
        wrote.clear()
        last = await persist(9)
        await asyncio.wait_for(wrote.wait(), 10)
        assert written[-1] == last


def test_the_flush_timer_rearms_on_uvloop_after_a_deadline_already_reached(
    tmp_path: Path,
) -> None:
    """uvloop answers ``call_at`` with a time already past with a plain ``Handle`` (no
    ``when()``); a turn committed while such a timer is set must still be answered (the
    load test found persists failing with an internal error after they committed)."""
    import uvloop

    async def scenario() -> None:
        async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
            actor = await reg.get("agent")
            sid = await actor.create_session()
            actor.mirror._arm(0.0)  # a held snapshot already due: fires at once
            for n in range(3):
                ctx = WorkingContext()
                ctx.add_messages(turn(n))
                last = await actor.persist_working_context(sid, ctx)
            await actor.mirror.drain()
            path = actor.mirror.session_dir(sid) / SNAPSHOT_FILE
            assert json.loads(path.read_text(encoding="utf-8"))["last_seq"] == last.last_seq

    uvloop.run(scenario())
