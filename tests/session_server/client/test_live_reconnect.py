"""Live turns across a SIGKILL of a real ``session-server serve`` subprocess: the producer
(``StreamWriter``) and a subscriber (``LiveSubscription``) both go on after the server
comes back on the same port; every chunk arrives once, in order, and the stored turn has
no duplicate."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from session_server.client import SessionClient
from session_server.client.live import LiveSubscription, StreamChunk, StreamClosed
from session_server.values.events import SessionEvent
from tests.support.restartable_process import RestartableProcess as Server
from tests.support.waiting import until

AGENT = "live-crash"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    running = Server(tmp_path / "memory")
    await running.start()
    try:
        yield running
    finally:
        await running.stop(signal.SIGKILL)


def text(i: int) -> dict[str, Any]:
    return {"type": "text", "text": f"{i} "}


async def drain(sub: LiveSubscription, items: list[Any]) -> None:
    async for item in sub:
        items.append(item)
        if isinstance(item, StreamClosed):
            return


def received_cursor(items: list[Any]) -> int:
    cursors = [i.cursor for i in items if isinstance(i, StreamChunk)]
    return max(cursors, default=0)


async def test_producer_and_subscriber_recover_from_a_sigkill(server: Server) -> None:
    async with (
        SessionClient(server.url, AGENT, reconnect_budget=30.0) as producer,
        SessionClient(server.url, AGENT, reconnect_budget=30.0) as watcher,
    ):
        sid = await producer.create_session()
        sub = await watcher.subscribe_live(sid)
        items: list[Any] = []
        reader = asyncio.ensure_future(drain(sub, items))
        writer = await producer.stream(sid, base_seq=0)
        for i in range(50):
            await writer.write(text(i))
        assert await writer.flush() == 50
        await until(lambda: received_cursor(items) == 50, "the first 50 chunks")
        # Killed with appends in flight: they may or may not have been stored.
        for i in range(50, 60):
            await writer.write(text(i))
        await server.restart(signal.SIGKILL)
        for i in range(60, 100):
            await writer.write(text(i))
        assert await writer.flush() == 100
        reply = "".join(f"{i} " for i in range(100))
        answer = await writer.close(
            [{"role": "user", "content": "count"}, {"role": "assistant", "content": reply}]
        )
        assert answer["seqs"] == [1, 2]
        await asyncio.wait_for(reader, 30)
        texts = [c["text"] for i in items if isinstance(i, StreamChunk) for c in i.chunks]
        # Once each, in order, from the first. The producer usually reconnects first;
        # when the subscriber comes back after the turn was stored, the chunks after its
        # cursor are erased and the stored reply below carries them.
        assert len(texts) >= 50
        assert texts == [f"{i} " for i in range(len(texts))]
        stored = [i for i in items if isinstance(i, SessionEvent)]
        assert [e.seq for e in stored] == [1, 2]
        assert isinstance(items[-1], StreamClosed) and items[-1].persisted
        events = await producer.load_events(sid, limit=10)
        assert [e.content for e in events] == ["count", reply]


async def test_a_close_retried_after_a_kill_stores_the_turn_once(server: Server) -> None:
    async with SessionClient(server.url, AGENT, reconnect_budget=30.0) as producer:
        sid = await producer.create_session()
        writer = await producer.stream(sid)
        await writer.write(text(1))
        await writer.flush()
        turn = [{"role": "assistant", "content": "1 "}]
        first = await writer.close(turn, idempotency_key="turn-1")
        await server.restart(signal.SIGKILL)
        # The answer was "lost": closing again after the restart finds no stream and
        # replays the stored turn's answer by its key.
        again = await writer.close(turn, idempotency_key="turn-1")
        assert again["seqs"] == first["seqs"] == [1]
        assert len(await producer.load_events(sid, limit=10)) == 1
