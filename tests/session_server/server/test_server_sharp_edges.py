"""Sharp edges of issue 12 (item 6), through real servers and real clients.

Idempotency keys reused with other content, conflicts naming ``base_seq``,
``session.deleted`` and ``events.subscribe`` with ``after_seq``, a second server on a held
memory dir, compaction events left out of ``events.load``, and a context window that says
how many events it left out (``omitted_events``; ``--context-limit`` and its variable).
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from session_server.client import SessionClient, Subscription
from session_server.values.errors import ConflictError
from session_server.values.events import ContextMessage, SessionEvent
from tests.support.server import ROOT, RunningServer, ServerProcess, running_server, turn_messages


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "memory") as running:
        yield running


def user(text: str) -> ContextMessage:
    return ContextMessage(role="user", content=text)


async def test_an_idempotency_key_reused_with_other_content_is_a_conflict(
    server: RunningServer,
) -> None:
    async with SessionClient(server.url, "bot") as client:
        sid = await client.create_session()
        first = await client.persist_turn(sid, [user("one")], idempotency_key="k")
        again = await client.persist_turn(sid, [user("one")], idempotency_key="k")
        assert again.seqs == first.seqs == [1]  # the same request: replayed, not rewritten
        with pytest.raises(ConflictError) as info:
            await client.persist_turn(sid, [user("two")], idempotency_key="k")
        assert info.value.code == -32002
        assert info.value.data == {"reason": "idempotency_mismatch", "field": "idempotency_key"}
        assert "idempotency_key" in info.value.message
        assert [e.content for e in await client.load_events(sid)] == ["one"]


async def test_a_conflict_on_turn_persist_names_base_seq(server: RunningServer) -> None:
    async with SessionClient(server.url, "bot") as client:
        sid = await client.create_session()
        ctx = await client.build_context(sid)
        await client.persist_turn(sid, [user("another writer")])
        ctx.add_message(user("mine"))
        with pytest.raises(ConflictError) as info:
            await client.persist_context(sid, ctx, on_conflict="reject")
        assert info.value.message.startswith(f"base_seq: session {sid!r} is at seq 1, not 0")
        assert info.value.data is not None
        assert info.value.data["field"] == "base_seq" and info.value.data["last_seq"] == 1


async def _seqs(sub: Subscription, until: int) -> list[int]:
    seqs: list[int] = []
    async for event in sub:
        seqs.append(event.seq)
        if event.seq >= until:
            break
    return seqs


async def test_subscribe_after_seq_replays_then_follows_without_gap_or_duplicate(
    server: RunningServer,
) -> None:
    async with (
        SessionClient(server.url, "bot") as writer,
        SessionClient(server.url, "bot") as reader,
    ):
        sid = await writer.create_session()
        for i in range(3):
            await writer.persist_turn(sid, turn_messages(i))  # seqs 1..12

        async def write_more() -> None:
            for i in range(3, 8):
                await writer.persist_turn(sid, turn_messages(i))  # seqs 13..32

        # Writes race with the subscription's replay: every seq arrives exactly once.
        task = asyncio.create_task(write_more())
        sub = await reader.subscribe(sid, after_seq=5)
        seqs = await asyncio.wait_for(_seqs(sub, 32), timeout=30)
        await task
        assert seqs == list(range(6, 33))
        await sub.close()


async def test_subscribers_get_session_deleted(server: RunningServer) -> None:
    async with (
        SessionClient(server.url, "bot") as owner,
        SessionClient(server.url, "bot") as watcher,
    ):
        sid = await owner.create_session()
        sub = await watcher.subscribe(sid)
        await owner.persist_turn(sid, [user("hi")])
        assert await owner.delete_session(sid)
        got = [e.seq async for e in sub]  # ends when session.deleted arrives
        assert got == [1] and sub.deleted


async def test_compaction_events_can_be_left_out_of_events_load(server: RunningServer) -> None:
    strategy = {"mode": "compact", "compact_trigger_turns": 2, "compact_keep": 1}
    async with SessionClient(server.url, "bot") as client:
        sid = await client.create_session()
        for i in range(4):
            await client.persist_turn(sid, turn_messages(i))
        await client.build_context(sid, strategy=strategy)  # the build appends a record
        everything = await client.load_events(sid, limit=None)
        assert "compaction" in [e.action for e in everything]
        kept = [a for a in ("user_message", "agent_message", "tool_call_request", "tool_result")]
        conversation = await client.load_events(sid, limit=None, actions=kept)
        assert conversation == [e for e in everything if e.action != "compaction"]


async def test_a_bounded_window_says_how_many_events_it_left_out(tmp_path: Path) -> None:
    options = {"context_limit": 8}
    async with (
        running_server(tmp_path / "memory", registry_options=options) as running,
        SessionClient(running.url, "bot") as client,
    ):
        sid = await client.create_session()
        short = await client.build_context(sid)
        assert short.omitted_events == 0
        for i in range(5):
            await client.persist_turn(sid, turn_messages(i))  # 20 events, 4 per turn
        ctx = await client.build_context(sid)
        assert len(ctx.messages) == 8 and ctx.omitted_events == 12
        everything = await client.build_context(sid, limit=100)
        assert len(everything.messages) == 20 and everything.omitted_events == 0
        raw = await client.call("context.build", {"session_id": sid})
        assert raw["omitted_events"] == 12


def _events(n: int) -> list[SessionEvent]:
    return [SessionEvent(action="user_message", content=f"m{i}") for i in range(n)]


async def test_context_limit_from_the_command_line_and_the_environment(tmp_path: Path) -> None:
    for args, env in ((("--context-limit", "3"), {}), ((), {"SESSION_SERVER_CONTEXT_LIMIT": "3"})):
        memory = tmp_path / f"memory{len(args)}"
        with ServerProcess(memory, *args, env=env) as proc:
            async with SessionClient(proc.url, "bot") as client:
                sid = await client.create_session()
                await client.append_events(sid, _events(10))
                ctx = await client.build_context(sid)
                assert [m.content for m in ctx.messages] == ["m7", "m8", "m9"]
                assert ctx.omitted_events == 7


def test_a_second_server_on_a_held_memory_dir_refuses_to_start(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    with ServerProcess(memory):
        again = ServerProcess(memory)
        second = subprocess.run(
            again.argv, capture_output=True, text=True, timeout=60, cwd=str(ROOT), env=again.env
        )
        assert second.returncode == 2
        assert str(memory.resolve()) in second.stderr
        assert "held by another session-server" in second.stderr
        assert "listening" not in second.stdout
