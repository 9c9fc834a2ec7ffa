"""The end-of-turn snapshot: rendered from the cache when it holds the window, else read
from the file on the mirror's worker thread (the event loop never reads for it)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from session_server import ActorRegistry, AgentActor
from session_server.core.agent_core import AgentCore
from session_server.mirror import SNAPSHOT_FILE
from session_server.runtime.mirror_link import MirrorLink, snapshot_from_file
from session_server.values.context import WorkingContext
from session_server.values.events import ContextMessage, ToolCall
from session_server.values.plans import SnapshotDue


def turn(n: int) -> list[ContextMessage]:
    return [
        ContextMessage(role="user", content=f"question {n}"),
        ContextMessage(role="assistant", content=f"answer {n}"),
    ]


def tool_turn(n: int) -> list[ContextMessage]:
    call = ToolCall(id=f"call-{n}", name="lookup", arguments={"n": n})
    return [
        ContextMessage(role="user", content=f"question {n}"),
        ContextMessage(role="assistant", tool_calls=[call]),
        ContextMessage(role="tool", tool_call_id=call.id, name="lookup", content=f"out {n} " * 30),
        ContextMessage(role="assistant", content=f"answer {n}"),
    ]


async def persist(actor: AgentActor, sid: str, messages: list[ContextMessage]) -> int:
    ctx = WorkingContext()
    ctx.add_messages(messages)
    return (await actor.persist_working_context(sid, ctx)).last_seq


async def paced(
    reg: ActorRegistry,
    *,
    delay: float,
    interval: float | None = None,
    cold: float | None = None,
) -> tuple[AgentActor, MirrorLink]:
    """The actor of agent ``agent`` and its mirror, which flushes ``delay`` seconds after a
    commit and renders a session's snapshot at most every ``interval`` seconds (``cold``:
    one read from the file); ``None`` keeps the default."""
    actor = await reg.get("agent")
    mirror = actor.mirror
    mirror.delay = delay
    if interval is not None:
        mirror.snapshot_interval = interval
    if cold is not None:
        mirror.cold_snapshot_interval = cold
    return actor, mirror


async def test_a_persist_only_client_costs_the_loop_no_read_and_gets_each_flush_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    windows: list[str] = []
    original = AgentCore.view

    def recording(self: AgentCore, session_id: str, limit: int, known: Any) -> Any:
        windows.append(session_id)
        return original(self, session_id, limit, known)

    monkeypatch.setattr(AgentCore, "view", recording)
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        # Flushes only when drained, below.
        actor, mirror = await paced(reg, delay=3600.0, interval=0.0, cold=0.0)
        read = mirror._read_snapshot
        assert read is not None
        threads: list[int] = []

        def recording_thread(due: SnapshotDue) -> Any:
            threads.append(threading.get_ident())
            return read(due)

        mirror._read_snapshot = recording_thread
        sid = await actor.create_session()
        path = mirror.session_dir(sid) / SNAPSHOT_FILE
        for flush in range(2):
            for n in range(5):
                last = await persist(actor, sid, tool_turn(10 * flush + n))
            await mirror.drain()
            assert json.loads(path.read_text(encoding="utf-8"))["last_seq"] == last
        assert windows == []  # no window read on the loop, and the cache stays cold
        assert actor.core.cached_view(sid, actor.context_limit) is None
        assert len(threads) == 2 and threading.get_ident() not in threads  # a worker's


async def test_the_snapshot_read_from_the_file_is_the_one_the_cache_renders(
    tmp_path: Path,
) -> None:
    """The same parts either way, with tool calls, a window cut inside a turn and a
    compaction record (a summary's memory block in the instructions): against the cache
    kept up by the commits since a first build, and against one seeded by a read."""
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("agent")
        sid = await actor.create_session()
        await actor.build_working_context(sid)  # the cache holds the session from here on
        due = SnapshotDue(sid, ["be brief"])
        for n in range(40):
            await persist(actor, sid, tool_turn(n))
            if n in (9, 25):
                kept_up = actor.core.snapshot_parts(due)
                assert kept_up is not None
                assert kept_up == snapshot_from_file(actor.path, actor.context_limit, 5000, due)
        await actor.compact(sid, strategy={"mode": "compact", "compact_keep": 2})
        for n in range(40, 43):
            await persist(actor, sid, tool_turn(n))
        cold = snapshot_from_file(actor.path, actor.context_limit, 5000, due)
        assert cold is not None and cold == actor.core.snapshot_parts(due)
        actor.core._recent.forget(sid)
        assert actor.core.snapshot_parts(due) is None
        await actor.build_working_context(sid)  # warms the cache
        warm = actor.core.snapshot_parts(due)
        assert cold is not None and warm is not None
        assert cold == warm
        messages, instructions, last_seq = cold
        session = await actor.get_session(sid)
        assert session is not None and last_seq == session["last_seq"]
        assert instructions[0] == "be brief" and len(messages) > 0
        assert (
            snapshot_from_file(actor.path, actor.context_limit, 5000, SnapshotDue("gone", []))
            is None
        )


async def test_a_warm_cache_renders_on_the_loop_and_a_failed_read_is_tried_again(
    tmp_path: Path,
) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor, mirror = await paced(reg, delay=3600.0, interval=0.0)
        sid = await actor.create_session()
        path = mirror.session_dir(sid) / SNAPSHOT_FILE
        reads: list[str] = []
        read = mirror._read_snapshot
        assert read is not None

        def failing(due: SnapshotDue) -> Any:
            reads.append(due.session_id)
            raise sqlite3.OperationalError("disk I/O error")

        mirror._read_snapshot = failing
        first = await persist(actor, sid, turn(0))
        await mirror.drain()
        assert reads == [sid] and not path.exists()  # not rendered: nothing written
        assert mirror.cursor(sid) == first  # the trace lines were written all the same

        mirror._read_snapshot = read
        await mirror.drain()  # no new turn: the failed one was held again
        assert json.loads(path.read_text(encoding="utf-8"))["last_seq"] == first
        last = await persist(actor, sid, turn(1))
        await mirror.drain()
        assert json.loads(path.read_text(encoding="utf-8"))["last_seq"] == last

        await actor.build_working_context(sid)  # the cache holds the window now
        mirror._read_snapshot = failing
        reads.clear()
        last = await persist(actor, sid, turn(2))
        await mirror.drain()
        assert reads == []  # rendered from the cache, on the loop
        assert json.loads(path.read_text(encoding="utf-8"))["last_seq"] == last


async def test_quick_turns_share_one_snapshot_per_interval_and_drain_writes_the_held_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot is a cache: a session's is rendered at most once per
    ``snapshot_interval``; turns in quicker succession share one, the held one is written
    when the interval has passed (no drain), and ``drain`` writes a held one at once."""
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor, mirror = await paced(reg, delay=0.001)
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
        mirror.cold_snapshot_interval = 0.05  # a persist-only client: its snapshots are read
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


async def test_a_snapshot_read_from_the_file_is_read_again_only_after_its_interval(
    tmp_path: Path,
) -> None:
    """Reads cost more than renders from the cache: at most one per
    ``cold_snapshot_interval`` per session, the latest held until then (or a drain)."""
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor, mirror = await paced(reg, delay=0.001, interval=0.0, cold=3600.0)
        loop = asyncio.get_running_loop()
        read = mirror._read_snapshot
        assert read is not None
        reads: list[int] = []
        done = asyncio.Event()

        def counting(due: SnapshotDue) -> Any:
            parts = read(due)
            assert parts is not None
            reads.append(parts[2])
            loop.call_soon_threadsafe(done.set)
            return parts

        mirror._read_snapshot = counting
        sid = await actor.create_session()
        path = mirror.session_dir(sid) / SNAPSHOT_FILE
        first = await persist(actor, sid, turn(0))
        await asyncio.wait_for(done.wait(), 10)
        assert reads == [first]
        for n in range(1, 4):
            last = await persist(actor, sid, turn(n))
        await mirror.drain()  # the held one, at once
        assert reads == [first, last]
        assert json.loads(path.read_text(encoding="utf-8"))["last_seq"] == last
        # Once the interval has passed, the timer writes the held one without a drain
        # (a new session: the interval counts from each one's last read).
        mirror.cold_snapshot_interval = 0.05
        other = await actor.create_session()
        opening = await persist(actor, other, turn(0))
        while reads[-1] != opening:  # its first read, before the next turn
            done.clear()
            await asyncio.wait_for(done.wait(), 10)
        count = len(reads)
        last = await persist(actor, other, turn(1))
        while reads[-1] != last:
            done.clear()
            await asyncio.wait_for(done.wait(), 10)
        assert len(reads) == count + 1  # one more read, by the timer (no drain)


async def test_one_failing_read_loses_nothing_else_of_the_batch(tmp_path: Path) -> None:
    """An unexpected error in one session's read: the batch's trace lines and the other
    sessions' snapshots are written and confirmed all the same."""
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor, mirror = await paced(reg, delay=3600.0, interval=0.0)
        broken, warm = await actor.create_session(), await actor.create_session()
        await actor.build_working_context(warm)  # rendered from the cache
        read = mirror._read_snapshot
        assert read is not None

        def buggy(due: SnapshotDue) -> Any:
            if due.session_id == broken:
                raise ValueError("a bug in a render")
            return read(due)

        mirror._read_snapshot = buggy
        last_broken = await persist(actor, broken, turn(0))
        last_warm = await persist(actor, warm, turn(0))
        await mirror.drain()
        assert mirror.cursor(broken) == last_broken and mirror.cursor(warm) == last_warm
        path = mirror.session_dir(warm) / SNAPSHOT_FILE
        assert json.loads(path.read_text(encoding="utf-8"))["last_seq"] == last_warm
        assert not (mirror.session_dir(broken) / SNAPSHOT_FILE).exists()


async def test_a_held_snapshot_does_not_keep_the_actor_busy_and_hibernation_writes_it(
    tmp_path: Path,
) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor, mirror = await paced(reg, delay=0.0, interval=0.0, cold=3600.0)
        sid = await actor.create_session()
        path = mirror.session_dir(sid) / SNAPSHOT_FILE
        first = await persist(actor, sid, turn(0))
        await mirror.drain()
        loop = asyncio.get_running_loop()
        appended = asyncio.Event()
        append = mirror.writer.append

        def tracing(session_id: str, events: Any) -> int | None:
            cursor = append(session_id, events)
            loop.call_soon_threadsafe(appended.set)
            return cursor

        mirror.writer.append = tracing  # type: ignore[method-assign]
        last = await persist(actor, sid, turn(1))  # its snapshot is held for an hour
        await asyncio.wait_for(appended.wait(), 10)  # the timer's batch, without a drain
        assert mirror._chain is not None
        await asyncio.wait([mirror._chain])
        assert mirror.schedule.holding and not mirror.busy and not actor.busy
        assert json.loads(path.read_text(encoding="utf-8"))["last_seq"] == first
        await actor.hibernate()
        assert not actor.is_open
        assert json.loads(path.read_text(encoding="utf-8"))["last_seq"] == last
