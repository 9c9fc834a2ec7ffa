"""``events.subscribe {after_seq}`` replays the past page by page, never all at once.

A real server on 127.0.0.1: the replay reads pages of at most ``REPLAY_BATCH`` events
and about ``max_subscriber_bytes`` bytes (recorded on the real actor method, which still
does its work), the next page only after the previous one is written, and the
subscriber gets every event exactly once, in order, with no gap, even while writers
append faster than it reads. ``events.load`` without a limit stops at the answer bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from session_server.client import SessionClient, Subscription
from session_server.runtime.actor import AgentActor
from session_server.server.fanout import REPLAY_BATCH
from session_server.values.errors import SessionServerError
from session_server.values.events import SessionEvent
from tests.support.server import running_server

AGENT = "replay"


def record_pages(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(events, bytes of content) of every bounded page the actor reads."""
    pages: list[tuple[int, int]] = []
    original: Callable[..., Any] = AgentActor.load_events_bounded

    async def wrapped(self: AgentActor, *args: Any, **kwargs: Any) -> Any:
        events, complete = await original(self, *args, **kwargs)
        pages.append((len(events), sum(len(e.content or "") for e in events)))
        return events, complete

    monkeypatch.setattr(AgentActor, "load_events_bounded", wrapped)
    return pages


async def seqs_until(sub: Subscription, last: int) -> list[int]:
    seqs: list[int] = []
    async for event in sub:
        seqs.append(event.seq)
        if event.seq >= last:
            break
    return seqs


async def fill(client: SessionClient, sid: str, count: int, size: int) -> None:
    for start in range(0, count, 500):
        n = min(500, count - start)
        await client.append_events(sid, [SessionEvent(content="x" * size) for _ in range(n)])


async def test_replay_is_paged_by_count(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pages = record_pages(monkeypatch)
    total = 5 * REPLAY_BATCH + 17
    async with (
        running_server(tmp_path / "memory", synchronous="NORMAL") as server,
        SessionClient(server.url, AGENT) as writer,
    ):
        sid = await writer.create_session()
        await fill(writer, sid, total, 10)
        async with SessionClient(server.url, AGENT) as reader:
            sub = await reader.subscribe(sid, after_seq=3)
            seqs = await asyncio.wait_for(seqs_until(sub, total), 60)
    assert seqs == list(range(4, total + 1))
    assert len(pages) >= 6
    assert max(n for n, _ in pages) <= REPLAY_BATCH


async def test_replay_is_paged_by_bytes_and_sends_no_gap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pages = record_pages(monkeypatch)
    bound = 64 * 1024
    async with (
        running_server(
            tmp_path / "memory", synchronous="NORMAL", max_subscriber_bytes=bound
        ) as server,
        SessionClient(server.url, AGENT) as writer,
    ):
        sid = await writer.create_session()
        await fill(writer, sid, 400, 4_000)  # 1.6 MB: 25 times the subscriber bound
        async with SessionClient(server.url, AGENT) as reader:
            sub = await reader.subscribe(sid, after_seq=0)
            seqs = await asyncio.wait_for(seqs_until(sub, 400), 60)
    # Every event came as a replayed notification: a gap would have been read with
    # events.load, which the recorder would not see as a page of its own.
    assert seqs == list(range(1, 401))
    assert len(pages) >= 20
    assert all(size <= bound for _, size in pages)


async def test_writes_during_a_long_replay_arrive_once_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        running_server(
            tmp_path / "memory", synchronous="NORMAL", max_subscriber_bytes=32 * 1024
        ) as server,
        SessionClient(server.url, AGENT) as writer,
    ):
        sid = await writer.create_session()
        await fill(writer, sid, 3 * REPLAY_BATCH, 200)
        appended = 0

        async def write_more() -> None:
            nonlocal appended
            # More than REPLAY_BATCH events while the replay runs: the held ones
            # overflow and are read back from SQLite.
            for _ in range(30):
                await writer.append_events(sid, [SessionEvent(content="y") for _ in range(40)])
                appended += 40

        async with SessionClient(server.url, AGENT) as reader:
            sub = await reader.subscribe(sid, after_seq=0)
            task = asyncio.create_task(write_more())
            first = await sub.__anext__()
            await task
            last = 3 * REPLAY_BATCH + appended
            rest = await asyncio.wait_for(seqs_until(sub, last), 60)
    assert [first.seq, *rest] == list(range(1, last + 1))


async def test_events_load_stops_at_the_answer_bound(tmp_path: Path) -> None:
    async with (
        running_server(
            tmp_path / "memory", synchronous="NORMAL", max_answer_bytes=200_000
        ) as server,
        SessionClient(server.url, AGENT) as client,
    ):
        sid = await client.create_session()
        await fill(client, sid, 500, 1_000)  # about 500 kB of content
        with pytest.raises(SessionServerError) as info:
            await client.call("events.load", {"session_id": sid, "limit": None})
        assert info.value.code == -32004
        assert info.value.data["field"] == "limit"
        page = await client.call("events.load", {"session_id": sid, "limit": 100})
        assert len(page["events"]) == 100
        with pytest.raises(SessionServerError) as info:
            await client.call("export.session", {"session_id": sid})
        assert info.value.code == -32004
        assert info.value.data["field"] == "session_id"
        with pytest.raises(SessionServerError) as info:
            await client.call("memory.view", {"session_id": sid})
        assert info.value.code == -32004
        view = await client.call(
            "memory.view",
            {"session_id": sid, "raw_trace_limit": 5, "conversation_limit": 5},
        )
        assert len(view["raw_traces"]) == 5 and len(view["conversation"]) == 5
        # A limit larger than the history is no limit: refused once the newest lines it
        # would show exceed twice the bound, before the rest of the files is read.
        huge = {"session_id": sid, "raw_trace_limit": 10**12, "conversation_limit": 10**12}
        with pytest.raises(SessionServerError) as info:
            await client.call("memory.view", huge)
        assert info.value.code == -32004
        assert info.value.data["field"] == "raw_trace_limit"
