"""Live turns over a real server on 127.0.0.1: ``stream.open``/``append``/``close``,
fencing, replay then tail with ``stream_cursor``, ``stream.closed`` after the stored
events, bounds, and nothing left on disk once a stream ends."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from session_server.client import SessionClient
from session_server.client.live import LiveSubscription, StreamChunk, StreamClosed
from session_server.client.sync_client import SyncSessionClient
from session_server.values.errors import ConflictError, NotFoundError, TooLargeError
from session_server.values.events import SessionEvent
from session_server.values.streams import StreamLimits
from tests.support.server import running_server

AGENT = "live"


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def agent_file(tmp_path: Path) -> Path:
    return tmp_path / "agents" / AGENT / "agent.sqlite"


def stream_rows(tmp_path: Path) -> tuple[int, list[Any]]:
    with sqlite3.connect(agent_file(tmp_path)) as conn:
        segments = conn.execute("SELECT COUNT(*) FROM stream_segments").fetchone()[0]
        streams = conn.execute("SELECT stream_id FROM streams").fetchall()
    return int(segments), [r[0] for r in streams]


async def collect(sub: LiveSubscription, until_closed: bool = True) -> list[Any]:
    items: list[Any] = []
    async for item in sub:
        items.append(item)
        if isinstance(item, StreamClosed) and until_closed:
            break
    return items


def chunk_texts(items: list[Any]) -> list[str]:
    return [c["text"] for i in items if isinstance(i, StreamChunk) for c in i.chunks]


async def test_a_streamed_turn_reaches_subscribers_then_is_stored(tmp_path: Path) -> None:
    async with running_server(tmp_path) as server, SessionClient(server.url, AGENT) as client:
        sid = await client.create_session()
        sub = await client.subscribe_live(sid)
        opened = await client.stream_open(sid, base_seq=0)
        assert opened["generation"] == 1 and opened["cursor"] == 0
        sid_stream = opened["stream_id"]
        c1 = await client.stream_append(sid_stream, 1, [text("Hel"), text("lo")])
        c2 = await client.stream_append(sid_stream, 1, [text(" world")])
        assert (c1, c2) == (2, 3)
        answer = await client.stream_close(
            sid_stream,
            1,
            {
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "Hello world"},
                ]
            },
        )
        assert answer["seqs"] == [1, 2] and answer["last_seq"] == 2
        items = await collect(sub)
        assert chunk_texts(items) == ["Hel", "lo", " world"]
        kinds = [type(i).__name__ for i in items]
        # The stored events come before ``stream.closed``.
        assert kinds.index("SessionEvent") < kinds.index("StreamClosed")
        assert items[-1] == StreamClosed(sid, sid_stream, True)
        events = [i for i in items if isinstance(i, SessionEvent)]
        assert [e.content for e in events] == ["hi", "Hello world"]
        await sub.close()
        # Nothing of the stream is left but its counters.
        segments, open_ids = stream_rows(tmp_path)
        assert segments == 0 and open_ids == [None]


async def test_resubscribe_with_stream_cursor_gets_the_rest_without_duplicates(
    tmp_path: Path,
) -> None:
    async with running_server(tmp_path) as server, SessionClient(server.url, AGENT) as client:
        sid = await client.create_session()
        writer = await client.stream(sid)
        for i in range(10):
            await writer.write(text(str(i)))
        assert await writer.flush() == 10
        late = await client.subscribe_live(sid, stream_cursor=4)
        await writer.write(text("10"))
        await writer.flush()
        await writer.close([{"role": "assistant", "content": "0123456789 10"}])
        items = await collect(late)
        assert chunk_texts(items) == [str(i) for i in range(4, 11)]  # "0" is cursor 1
        # Without a cursor a new subscriber gets the whole stream in progress.
        writer2 = await client.stream(sid)
        await writer2.write(text("a"), text("b"))
        await writer2.flush()
        fresh = await client.subscribe_live(sid)
        await writer2.abandon()
        items = await collect(fresh)
        assert chunk_texts(items) == ["a", "b"]
        assert items[-1].persisted is False
        # Cursors never go back: the second stream started after the first.
        cursors = [i.cursor for i in items if isinstance(i, StreamChunk)]
        assert cursors[-1] == 13


async def test_a_subscriber_back_after_the_turn_was_stored_gets_it_and_the_close(
    tmp_path: Path,
) -> None:
    """The order a server restart often gives: the producer reconnects first and stores
    the turn; the subscriber comes back after it, from the last seq and cursor it had."""
    async with running_server(tmp_path) as server, SessionClient(server.url, AGENT) as client:
        sid = await client.create_session()
        writer = await client.stream(sid, base_seq=0)
        await writer.write(*(text(str(i)) for i in range(5)))
        assert await writer.flush() == 5
        turn = [{"role": "user", "content": "n"}, {"role": "assistant", "content": "01234"}]
        await writer.close(turn)
        back = await client.subscribe_live(sid, after_seq=0, stream_cursor=3)
        items = await collect(back)
        # The chunks are erased; the stored turn comes, then the stream's end.
        assert chunk_texts(items) == []
        assert [e.seq for e in items if isinstance(e, SessionEvent)] == [1, 2]
        assert items[-1] == StreamClosed(sid, writer.stream_id, True)
        # A new subscriber (no cursor) is not told of an earlier stream's end.
        fresh = await client.subscribe_live(sid, after_seq=0)
        writer2 = await client.stream(sid)
        await writer2.abandon()
        items = await collect(fresh)
        assert items[-1] == StreamClosed(sid, writer2.stream_id, False)
        assert [i for i in items if isinstance(i, StreamClosed)] == [items[-1]]


async def test_a_second_open_fences_the_first_producer(tmp_path: Path) -> None:
    async with running_server(tmp_path) as server, SessionClient(server.url, AGENT) as client:
        sid = await client.create_session()
        first = await client.stream_open(sid)
        await client.stream_append(first["stream_id"], 1, [text("a")])
        second = await client.stream_open(sid)
        assert second["stream_id"] == first["stream_id"]
        assert second["generation"] == 2 and second["cursor"] == 1
        with pytest.raises(ConflictError) as refused:
            await client.stream_append(first["stream_id"], 1, [text("zombie")])
        assert refused.value.data is not None
        assert refused.value.data["reason"] == "stale_generation"
        with pytest.raises(ConflictError):
            await client.stream_close(first["stream_id"], 1, None)
        assert await client.stream_append(second["stream_id"], 2, [text("b")]) == 2
        assert await client.stream_close(second["stream_id"], 2) == {"abandoned": True}
        with pytest.raises(NotFoundError):
            await client.stream_append(second["stream_id"], 2, [text("c")])


async def test_after_cursor_makes_a_retried_append_idempotent(tmp_path: Path) -> None:
    async with running_server(tmp_path) as server, SessionClient(server.url, AGENT) as client:
        sid = await client.create_session()
        s = await client.stream_open(sid)
        sid_s = s["stream_id"]
        assert await client.stream_append(sid_s, 1, [text("a"), text("b")], after_cursor=0) == 2
        # The same append again (its answer was lost): nothing added.
        assert await client.stream_append(sid_s, 1, [text("a"), text("b")], after_cursor=0) == 2
        # Overlapping: only the new chunk is added.
        assert await client.stream_append(sid_s, 1, [text("b"), text("c")], after_cursor=1) == 3
        # A late retry answers its own last cursor, not the stream's.
        assert await client.stream_append(sid_s, 1, [text("a")], after_cursor=0) == 1
        with pytest.raises(ConflictError) as gap:
            await client.stream_append(sid_s, 1, [text("e")], after_cursor=9)
        assert gap.value.data is not None and gap.value.data["cursor"] == 3
        sub = await client.subscribe_live(sid, stream_cursor=0)
        await client.stream_close(sid_s, 1, None)
        assert chunk_texts(await collect(sub)) == ["a", "b", "c"]


async def test_close_with_a_moved_session_is_a_conflict_and_keeps_the_stream(
    tmp_path: Path,
) -> None:
    async with running_server(tmp_path) as server, SessionClient(server.url, AGENT) as client:
        sid = await client.create_session()
        s = await client.stream_open(sid, base_seq=0)
        await client.stream_append(s["stream_id"], 1, [text("x")])
        await client.append_events(sid, [SessionEvent(content="meanwhile")])
        turn = {"messages": [{"role": "assistant", "content": "x"}], "idempotency_key": "k1"}
        with pytest.raises(ConflictError):
            await client.stream_close(s["stream_id"], 1, turn)
        segments, open_ids = stream_rows(tmp_path)
        assert segments == 1 and open_ids == [s["stream_id"]]
        # Taken over at the session's new seq, the turn is stored.
        again = await client.stream_open(sid, base_seq=1)
        answer = await client.stream_close(s["stream_id"], again["generation"], turn)
        assert answer["seqs"] == [2]
        # A close repeated after its answer was lost answers the same.
        assert await client.stream_close(s["stream_id"], again["generation"], turn) == answer
        assert stream_rows(tmp_path)[0] == 0


async def test_bounds_are_refused_naming_the_field(tmp_path: Path) -> None:
    limits = StreamLimits(max_chunk_bytes=64, max_stream_chunks=5, max_streams_per_connection=1)
    async with (
        running_server(tmp_path, registry_options={"stream_limits": limits}) as server,
        SessionClient(server.url, AGENT) as client,
    ):
        sid = await client.create_session()
        other = await client.create_session()
        s = await client.stream_open(sid)
        with pytest.raises(TooLargeError, match=r"chunks\[1\]"):
            await client.stream_append(s["stream_id"], 1, [text("a"), text("x" * 100)])
        with pytest.raises(TooLargeError, match="max_stream_chunks"):
            await client.stream_append(s["stream_id"], 1, [text("a")] * 6)
        with pytest.raises(TooLargeError, match="open streams"):
            await client.stream_open(other)
        with pytest.raises(Exception, match=r"chunks\[0\]"):
            await client.stream_append(s["stream_id"], 1, ["not an object"])  # type: ignore[list-item]
        # Taking over one's own stream is not one more.
        assert (await client.stream_open(sid))["generation"] == 2


async def test_chunks_survive_a_restart_and_an_idle_stream_expires(tmp_path: Path) -> None:
    async with running_server(tmp_path) as server, SessionClient(server.url, AGENT) as client:
        sid = await client.create_session()
        writer = await client.stream(sid)
        for i in range(100):
            await writer.write(text(str(i)))
        await writer.flush()
        # 100 chunks in a couple of segment rows, not 100.
        assert stream_rows(tmp_path)[0] <= 3
    limits = StreamLimits(idle_seconds=0.2)
    async with (
        running_server(tmp_path, registry_options={"stream_limits": limits}) as server,
        SessionClient(server.url, AGENT) as client,
    ):
        sub = await client.subscribe_live(sid, stream_cursor=97)
        items = await collect(sub)
        assert chunk_texts(items) == ["97", "98", "99"]
        assert items[-1].persisted is False  # expired while idle
        assert stream_rows(tmp_path) == (0, [None])


async def test_deleting_the_session_ends_its_stream(tmp_path: Path) -> None:
    async with running_server(tmp_path) as server, SessionClient(server.url, AGENT) as client:
        sid = await client.create_session()
        s = await client.stream_open(sid)
        await client.stream_append(s["stream_id"], 1, [text("secret")])
        await client.delete_session(sid)
        with pytest.raises(NotFoundError):
            await client.stream_append(s["stream_id"], 1, [text("more")])
        assert stream_rows(tmp_path) == (0, [])


async def test_the_sync_client_streams_a_turn(tmp_path: Path) -> None:
    async with running_server(tmp_path) as server:
        client = SyncSessionClient(server.url, AGENT)
        try:
            sid = await client.acall("create_session")
            opened = await client.acall("stream_open", sid)
            sid_s, gen = opened["stream_id"], opened["generation"]
            assert await client.acall("stream_append", sid_s, gen, [text("hi")]) == 1
            turn = {"messages": [{"role": "assistant", "content": "hi"}]}
            answer = await client.acall("stream_close", sid_s, gen, turn)
            assert answer["seqs"] == [1]
            with pytest.raises(AttributeError):
                client.subscribe_live  # noqa: B018  # an async iterator: not proxied
        finally:
            await client.aclose()
