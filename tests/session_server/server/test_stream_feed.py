"""``StreamFeed`` against a real agent (``ActorRegistry`` on a real SQLite file): the two
orders of a subscriber coming back and the live turn ending, driven explicitly.

The feed of a resumed subscription (``stream_cursor``) used to learn only of streams in
progress: when the turn was stored before the subscriber came back (after a server
restart, the producer often reconnects first), its chunks were erased and the feed sent
neither chunks nor ``stream.closed``, so the subscriber waited for ever."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from session_server.runtime.actor import AgentActor
from session_server.runtime.registry import ActorRegistry
from session_server.server.fanout import Topic
from session_server.server.stream_feed import StreamFeed


class Recorder:
    """A connection that writes every notification at once (``fanout.Subscriber``)."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def send(self, data: bytes, on_written: Callable[[], None] | None = None) -> None:
        self.sent.append(json.loads(data))
        if on_written is not None:
            on_written()

    def chunk_cursors(self) -> list[int]:
        return [
            m["params"]["cursor"] - len(m["params"]["chunks"]) + 1 + i
            for m in self.sent
            if m["method"] == "stream.chunk"
            for i in range(len(m["params"]["chunks"]))
        ]

    def closes(self) -> list[dict[str, Any]]:
        return [m["params"] for m in self.sent if m["method"] == "stream.closed"]


class Topics:
    def __init__(self) -> None:
        self.topics: dict[tuple[str, str], Topic] = {}


@pytest.fixture
async def actor(tmp_path: Path) -> AsyncIterator[AgentActor]:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        yield await reg.get("feeds")


def text(i: int) -> dict[str, Any]:
    return {"type": "text", "text": f"{i} "}


TURN = [{"role": "user", "content": "count"}, {"role": "assistant", "content": "..."}]


async def streamed(actor: AgentActor, chunks: int) -> tuple[str, dict[str, Any]]:
    sid = await actor.create_session()
    opened = await actor.stream_open(sid, base_seq=0)
    await actor.stream_append(opened["stream_id"], 1, [text(i) for i in range(chunks)])
    return sid, opened


async def test_resumed_before_the_turn_is_stored_gets_the_rest_then_the_close(
    actor: AgentActor,
) -> None:
    sid, opened = await streamed(actor, 5)
    conn = Recorder()
    feed = StreamFeed(conn, sid, actor.streams, 3, None)  # saw chunks 1..3
    feed.start()
    await actor.stream_append(opened["stream_id"], 1, [text(5)])
    await actor.stream_close(opened["stream_id"], 1, TURN)
    assert conn.chunk_cursors() == [4, 5, 6]
    assert conn.closes() == [
        {"session_id": sid, "stream_id": opened["stream_id"], "persisted": True}
    ]


async def test_resumed_after_the_turn_is_stored_gets_the_missed_close(
    actor: AgentActor,
) -> None:
    sid, opened = await streamed(actor, 5)
    await actor.stream_close(opened["stream_id"], 1, TURN)
    conn = Recorder()
    feed = StreamFeed(conn, sid, actor.streams, 3, None)
    feed.start()
    # The chunks after 3 are erased (the stored turn holds the reply); the end is told.
    assert conn.chunk_cursors() == []
    assert conn.closes() == [
        {"session_id": sid, "stream_id": opened["stream_id"], "persisted": True}
    ]


async def test_an_abandoned_stream_is_told_as_not_persisted(actor: AgentActor) -> None:
    sid, opened = await streamed(actor, 2)
    await actor.stream_close(opened["stream_id"], 1)
    conn = Recorder()
    StreamFeed(conn, sid, actor.streams, 2, None).start()
    assert conn.closes() == [
        {"session_id": sid, "stream_id": opened["stream_id"], "persisted": False}
    ]


async def test_a_stream_ending_between_listen_and_start_is_told_once(
    actor: AgentActor,
) -> None:
    """The subscribe registers the feed before its reads; the stream ends during them."""
    sid, opened = await streamed(actor, 5)
    conn = Recorder()
    feed = StreamFeed(conn, sid, actor.streams, 3, None)
    await actor.stream_close(opened["stream_id"], 1, TURN)
    assert conn.sent == []  # nothing before the subscribe answer
    feed.start()
    assert len(conn.closes()) == 1  # heard live and owed on resume: sent once


async def test_a_new_subscriber_after_the_end_or_one_in_a_later_stream_gets_no_close(
    actor: AgentActor,
) -> None:
    sid, opened = await streamed(actor, 5)
    await actor.stream_close(opened["stream_id"], 1, TURN)
    fresh = Recorder()
    StreamFeed(fresh, sid, actor.streams, None, None).start()
    assert fresh.sent == []
    second = await actor.stream_open(sid)
    await actor.stream_append(second["stream_id"], second["generation"], [text(9)])
    later = Recorder()
    StreamFeed(later, sid, actor.streams, 6, None).start()  # chunk 6 is the new stream's
    assert later.closes() == []
    assert later.chunk_cursors() == []  # nothing after 6 yet


async def test_the_close_waits_for_the_replay_of_stored_events(actor: AgentActor) -> None:
    sid, opened = await streamed(actor, 5)
    await actor.stream_close(opened["stream_id"], 1, TURN)
    conn = Recorder()
    topic = Topic(Topics(), (actor.agent_id, sid))
    feed = StreamFeed(conn, sid, actor.streams, 5, topic)
    feed.start()  # the close waits behind the topic's queued events: a round
    round_done = asyncio.Event()
    topic.after_pending(round_done.set)  # queued after the feed's close
    await round_done.wait()
    assert conn.closes() == []  # the subscription is still replaying stored events
    feed.caught_up()
    assert conn.closes() == [
        {"session_id": sid, "stream_id": opened["stream_id"], "persisted": True}
    ]
