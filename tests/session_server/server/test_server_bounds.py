"""Bounds the server keeps on what clients control (issue 13, items 1, 2, 6, 8).

Real server on 127.0.0.1, real sockets. Clients that "do not read" are ``websockets``
connections with a tiny receive queue whose frames are never consumed: once their queue
is full they stop reading the socket, exactly like a stalled peer.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus

from session_server.client import SessionClient
from session_server.server import SessionServer, connection_pump
from session_server.values.errors import InvalidParamsError, NotFoundError, UnavailableError
from tests.support.hardening import noise, request, stalled
from tests.support.server import RunningServer, running_server
from tests.support.waiting import until

AGENT = "bounds-agent"
DEADLINE_S = 20.0  # guards against a hung server; never used to synchronise

_ENC = msgspec.json.Encoder()
_DEC = msgspec.json.Decoder()


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(
        tmp_path / "memory",
        max_inflight=4,
        max_outgoing_bytes=256 * 1024,
        max_batch=8,
        max_answer_bytes=200_000,
        max_subscriber_bytes=64 * 1024,
        max_connections=6,
        stop_timeout=3.0,
    ) as running:
        async with SessionClient(running.url, AGENT) as client:
            await client.create_session(session_id="s")
            big = [{"content": noise(20_000)} for _ in range(10)]
            await client.append_events("s", big)
        yield running


def only_connection(server: SessionServer) -> Any:
    assert len(server._connections) == 1
    return next(iter(server._connections))


async def test_unread_answers_hold_the_share(server: RunningServer) -> None:
    """A client pipelining 400 requests with 100 kB answers, reading none: the server
    stops serving it once its share of the unread-answer bound is full (a load reserves
    ``max_answer_bytes`` before it runs: the next one waits, and the reader with it),
    holds no more than that share, and once the client reads, every request is
    answered, in full."""
    ws = await stalled(server.url, AGENT)
    try:
        n = 400
        for i in range(n):
            await ws.send(request(i, "events.load", session_id="s", limit=5), text=True)
        conn = only_connection(server.server)
        share = server.server.max_outgoing_bytes
        await until(
            lambda: conn.outgoing and conn.answer_room.waiting and not conn.writable.is_set(),
            "a request waiting for room behind unwritten answers",
        )
        assert len(conn.outgoing) <= server.server.max_inflight
        assert conn.outgoing_bytes <= share
        assert conn.answer_room.in_use <= share
        assert server.server.answer_budget.in_use == conn.answer_room.in_use
        # Now read everything: all n answers arrive, none lost.
        seen = set()
        while len(seen) < n:
            async with asyncio.timeout(DEADLINE_S):
                answer = _DEC.decode(await ws.recv(decode=False))
            assert len(answer["result"]["events"]) == 5
            seen.add(answer["id"])
        assert seen == set(range(n))
    finally:
        await ws.close()


async def test_batch_length_and_answer_size_are_bounded(server: RunningServer) -> None:
    async with connect(f"{server.url}/v1/agents/{AGENT}") as ws:
        too_long = [{"jsonrpc": "2.0", "id": i, "method": "session.list"} for i in range(9)]
        await ws.send(_ENC.encode(too_long), text=True)
        answer = _DEC.decode(await ws.recv())
        assert answer["error"]["code"] == -32600
        assert "maximum of 8" in answer["error"]["message"]

        # Each load answers ~100 kB; the bound (200 kB) lets one through whole.
        batch = [
            {
                "jsonrpc": "2.0",
                "id": i,
                "method": "events.load",
                "params": {"session_id": "s", "limit": 5},
            }
            for i in range(8)
        ]
        await ws.send(_ENC.encode(batch), text=True)
        answers = _DEC.decode(await ws.recv())
        assert [a["id"] for a in answers] == list(range(8))
        assert "result" in answers[0]
        assert all(a["error"]["code"] == -32004 for a in answers[2:])
        assert sum(len(_ENC.encode(a)) for a in answers) <= 200_000

        # A single answer over the bound is -32004 with the id; the connection stays up.
        await ws.send(request(99, "events.load", session_id="s", limit=None), text=True)
        await ws.send(request(100, "session.list"), text=True)
        got = [_DEC.decode(await ws.recv()), _DEC.decode(await ws.recv())]
        big, small = sorted(got, key=lambda a: int(a["id"]))
        assert big["id"] == 99 and big["error"]["code"] == -32004
        assert "max_answer_bytes" in big["error"]["message"]
        assert small["id"] == 100 and "result" in small


async def test_non_reading_subscriber_gets_a_gap_and_writers_are_not_slowed(
    server: RunningServer,
) -> None:
    """A subscriber that stops reading holds at most ``max_subscriber_bytes`` of
    notifications; writers keep being answered; when it reads again it is told of the
    gap (``events.gap``), and the Python client fills it, so it sees every event once."""
    sub_client = SessionClient(server.url, AGENT, max_size=None)
    await sub_client.connect()
    try:
        sub = await sub_client.subscribe("s")
        # Stall the subscriber's socket: its reader task is paused by filling the queue.
        stalled_ws = await stalled(server.url, AGENT)
        await stalled_ws.send(request(1, "events.subscribe", session_id="s"), text=True)
        async with SessionClient(server.url, AGENT) as writer:
            for i in range(60):
                async with asyncio.timeout(DEADLINE_S):
                    await writer.append_events("s", [{"content": f"{i}:" + noise(200_000)}])
        conns = [c for c in server.server._connections if "s" in c.subscriptions]
        stalled_conn = next(c for c in conns if c.ws.remote_address[1] == _port(stalled_ws))
        sub_state = stalled_conn.subscriptions["s"]
        await until(lambda: sub_state.gap is not None, "the stalled subscriber to lag")
        assert sub_state.queued <= 64 * 1024 + 201_000
        # The reading subscriber got everything, in order.
        got: list[int] = []
        while len(got) < 60:
            async with asyncio.timeout(DEADLINE_S):
                event = await sub.__anext__()
            got.append(event.seq)
        assert got == list(range(11, 71))
        # The stalled one reads again: some notifications, one gap, then live again.
        methods: list[str] = []
        gap: dict[str, Any] = {}
        while not gap:
            async with asyncio.timeout(DEADLINE_S):
                message = _DEC.decode(await stalled_ws.recv(decode=False))
            methods.append(message.get("method", "answer"))
            if message.get("method") == "events.gap":
                gap = message["params"]
        assert gap["session_id"] == "s" and gap["to_seq"] == 70
        assert methods[0] == "answer" and "events.appended" in methods
        await stalled_ws.close()
    finally:
        await sub_client.close()


async def test_client_fills_a_gap_in_order(server: RunningServer) -> None:
    """The Python client's subscription replaces an ``events.gap`` by the missed events."""
    async with SessionClient(server.url, AGENT, max_size=None) as client:
        sub = await client.subscribe("s")
        sub.gap(2, 4)  # as the notification would
        async with SessionClient(server.url, AGENT) as writer:
            await writer.append_events("s", [{"content": "after"}])
        seqs = []
        for _ in range(4):
            async with asyncio.timeout(DEADLINE_S):
                seqs.append((await sub.__anext__()).seq)
        assert seqs == [2, 3, 4, 11]


def connection_of(server: RunningServer, ws: ClientConnection) -> Any:
    """The server's side of the client connection ``ws``."""
    return next(c for c in server.server._connections if c.ws.remote_address[1] == _port(ws))


def peaks_of_outgoing(monkeypatch: pytest.MonkeyPatch) -> dict[int, int]:
    """The most bytes each connection (by ``id``) had waiting to be written, recorded by
    the real ``Connection.send`` (it still queues)."""
    peaks: dict[int, int] = {}
    original = connection_pump.Connection.send

    def send(self: connection_pump.Connection, data: bytes, *args: Any) -> None:
        original(self, data, *args)
        peaks[id(self)] = max(peaks.get(id(self), 0), self.outgoing_bytes)

    monkeypatch.setattr(connection_pump.Connection, "send", send)
    return peaks


async def read_notifications(ws: ClientConnection, last: dict[str, int]) -> dict[str, list[str]]:
    """Read ``ws`` until every session of ``last`` is covered up to its seq (by appended
    events or a gap); the notification methods per session."""
    seen: dict[str, int] = {}
    methods: dict[str, list[str]] = {}
    while any(seen.get(sid, 0) < seq for sid, seq in last.items()):
        async with asyncio.timeout(DEADLINE_S):
            message = _DEC.decode(await ws.recv(decode=False))
        params = message.get("params") or {}
        sid = params.get("session_id")
        if sid is None:
            continue  # a subscribe answer
        methods.setdefault(sid, []).append(message["method"])
        if message["method"] == "events.appended":
            seen[sid] = max(seen.get(sid, 0), params["events"][-1]["seq"])
        elif message["method"] == "events.gap":
            seen[sid] = max(seen.get(sid, 0), params["to_seq"])
    return methods


async def test_a_connection_subscribed_to_many_sessions_holds_one_bound(
    server: RunningServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A connection that does not read, subscribed to 8 sessions that each receive 2 MB,
    holds at most ``max_outgoing_bytes`` plus one notification, not 8 times
    ``max_subscriber_bytes`` plus a notification each (its subscriptions queued on their
    own bounds: up to 256 of them per connection); then, reading, it gets every event or
    an ``events.gap`` naming it. Replays from seq 0 of the same 8 sessions take turns
    under the same bound (each sent its first page at once)."""
    peaks = peaks_of_outgoing(monkeypatch)
    sessions = [f"m{i}" for i in range(8)]
    bound = server.server.max_outgoing_bytes + 201_000
    async with SessionClient(server.url, AGENT) as writer:
        for sid in sessions:
            await writer.create_session(session_id=sid)
        stalled_ws = await stalled(server.url, AGENT)
        try:
            for i, sid in enumerate(sessions):
                await stalled_ws.send(request(i, "events.subscribe", session_id=sid), text=True)
            conn = connection_of(server, stalled_ws)
            await until(lambda: len(conn.subscriptions) == 8, "the 8 subscriptions")
            for _ in range(10):
                for sid in sessions:
                    async with asyncio.timeout(DEADLINE_S):
                        await writer.append_events(sid, [{"content": noise(200_000)}])
            await until(
                lambda: all(s.gap is not None or s.queued for s in conn.subscriptions.values()),
                "every subscription to be behind",
            )
            methods = await read_notifications(stalled_ws, dict.fromkeys(sessions, 10))
            assert all("events.gap" in methods[sid] for sid in sessions), methods
            assert peaks[id(conn)] <= bound, (peaks[id(conn)], bound)
        finally:
            await stalled_ws.close()
        replaying = await stalled(server.url, AGENT)
        try:
            for i, sid in enumerate(sessions):
                params = {"session_id": sid, "after_seq": 0}
                await replaying.send(request(i, "events.subscribe", **params), text=True)
            methods = await read_notifications(replaying, dict.fromkeys(sessions, 10))
            assert all("events.gap" not in m for m in methods.values()), methods
            conn = connection_of(server, replaying)
            assert peaks[id(conn)] <= bound, (peaks[id(conn)], bound)
        finally:
            await replaying.close()


def _port(ws: ClientConnection) -> int:
    return int(ws.local_address[1])


async def test_connection_maximum_refuses_with_503_and_logs_once(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="session_server.server")
    held = [await connect(f"{server.url}/v1/agents/{AGENT}") for _ in range(6)]
    try:
        for _ in range(20):
            with pytest.raises(InvalidStatus) as info:
                await connect(f"{server.url}/v1/agents/{AGENT}")
            assert info.value.response.status_code == http.HTTPStatus.SERVICE_UNAVAILABLE
        with pytest.raises(UnavailableError) as refused:
            await SessionClient(server.url, AGENT, reconnect_budget=0).connect()
        assert isinstance(refused.value.__cause__, UnavailableError)
        assert refused.value.__cause__.data == {
            "http_status": 503,
            "retryable": True,
            "retry_after": 1,
        }
    finally:
        for ws in held:
            await ws.close()
    refusals = [r for r in caplog.records if "refusing connections" in r.getMessage()]
    assert len(refusals) == 1
    assert not any(r.exc_info for r in caplog.records)
    # Room again once they are gone.
    await until(lambda: len(server.server._connections) == 0, "connections to end")
    async with SessionClient(server.url, AGENT) as client:
        assert await client.list_sessions()


async def test_idle_connection_is_closed_but_a_subscriber_receiving_events_is_not(
    tmp_path: Path,
) -> None:
    """A subscription keeps its connection while its session has events (a quiet one
    does not: ``test_server_front_door.py``)."""
    async with (
        running_server(tmp_path / "memory", idle_timeout=0.2) as running,
        SessionClient(running.url, AGENT) as writer,
    ):
        await writer.create_session(session_id="s")
        async with connect(f"{running.url}/v1/agents/{AGENT}") as listener:
            await listener.send(request(1, "events.subscribe", session_id="s"), text=True)
            assert "result" in _DEC.decode(await listener.recv())

            async def write_events() -> None:
                while True:
                    await writer.append_events("s", [{"content": "tick"}])
                    await asyncio.sleep(0.05)  # pacing the writes, not a wait

            ticking = asyncio.create_task(write_events())
            try:
                async with connect(f"{running.url}/v1/agents/{AGENT}") as idle:
                    async with asyncio.timeout(DEADLINE_S):
                        await idle.wait_closed()
                    assert idle.close_code == 1000 and idle.close_reason == "idle timeout"
            finally:
                ticking.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await ticking
            # The idle one was closed after several idle periods; the subscriber lives.
            await listener.send(request(2, "session.list"), text=True)
            while (answer := _DEC.decode(await listener.recv())).get("id") != 2:
                assert answer["method"] == "events.appended"


async def test_a_connection_sending_more_often_than_the_idle_timeout_stays_open(
    tmp_path: Path,
) -> None:
    """Each frame moves the idle deadline: a client calling every 0.1 s for three idle
    periods (1 s) is never closed, and is once it stops."""
    async with (
        running_server(tmp_path / "memory", idle_timeout=1.0) as running,
        connect(f"{running.url}/v1/agents/{AGENT}") as ws,
    ):
        started = time.monotonic()
        i = 0
        while time.monotonic() - started < 3.0:
            last_sent = time.monotonic()
            await ws.send(request(i, "session.list"), text=True)
            assert _DEC.decode(await ws.recv())["id"] == i
            i += 1
            await asyncio.sleep(0.1)  # the pace under test, not a synchronisation
        async with asyncio.timeout(DEADLINE_S):
            await ws.wait_closed()
        assert ws.close_code == 1000 and ws.close_reason == "idle timeout"
        assert i >= 20  # the calls went on for three idle periods
        assert time.monotonic() - last_sent >= 1.0  # closed an idle after the last


async def test_stop_is_bounded_with_a_client_that_never_reads(server: RunningServer) -> None:
    ws = await stalled(server.url, AGENT)
    for i in range(200):
        await ws.send(request(i, "events.load", session_id="s", limit=5), text=True)
    conn = only_connection(server.server)
    await until(lambda: conn.outgoing and not conn.writable.is_set(), "answers stuck")
    started = time.monotonic()
    await server.server.stop()
    elapsed = time.monotonic() - started
    assert elapsed < server.server.stop_timeout + 1.0
    assert not server.server._connections
    await ws.close()


async def test_duplicate_authorization_headers_get_400(tmp_path: Path) -> None:
    async with running_server(tmp_path / "memory", tokens=["secret-token"]) as running:
        port = int(running.url.rsplit(":", 1)[1])
        raw = (
            f"GET /v1/agents/{AGENT} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "Sec-WebSocket-Version: 13\r\nAuthorization: Bearer secret-token\r\n"
            "Authorization: Bearer other\r\n\r\n"
        ).encode()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(raw)
        await writer.drain()
        status = await reader.readline()
        writer.close()
        assert status.startswith(b"HTTP/1.1 400"), status


async def test_out_of_range_integers_name_the_field(server: RunningServer) -> None:
    big = 2**70
    async with SessionClient(server.url, AGENT) as client:
        cases = {
            "params.limit": ("events.load", {"session_id": "s", "limit": big}),
            "params.after_seq": ("events.load", {"session_id": "s", "after_seq": -big}),
            "params.events[0].timestamp": (
                "events.append",
                {"session_id": "s", "events": [{"content": "x", "timestamp": big}]},
            ),
            "params.base_seq": (
                "turn.persist",
                {"session_id": "s", "messages": [], "base_seq": big},
            ),
        }
        for field, (method, params) in cases.items():
            with pytest.raises(InvalidParamsError) as info:
                await client.call(method, params)
            assert info.value.data == {"field": field}
            assert field in info.value.message


async def test_events_load_of_unknown_session_is_not_found(server: RunningServer) -> None:
    async with SessionClient(server.url, AGENT) as client:
        with pytest.raises(NotFoundError):
            await client.load_events("no-such-session")
        assert await client.load_events("s", actions=["tool_result"]) == []


async def test_unread_answers_written_at_once_still_hold_the_share(server: RunningServer) -> None:
    """Answers up to ``DIRECT_WRITE_BYTES`` are written at once while nothing is queued
    and writing is not paused. A client pipelining 600 requests with such answers (17
    MB, more than the sockets' buffers hold) and reading none is still stopped: once
    writing pauses, the answers queue and fill its share of the unread-answer bound. The
    transport then holds at most its high-water mark plus two answers (one written at
    once, one being flushed), and every answer arrives once the client reads."""
    size = connection_pump.DIRECT_WRITE_BYTES - 4096
    async with SessionClient(server.url, AGENT) as client:
        await client.create_session(session_id="near")
        await client.append_events("near", [{"content": noise(size)}])
    ws = await stalled(server.url, AGENT)
    try:
        n = 600
        for i in range(n):
            await ws.send(request(i, "events.load", session_id="near"), text=True)
        conn = only_connection(server.server)
        await until(
            lambda: conn.outgoing and conn.answer_room.waiting and not conn.writable.is_set(),
            "a request waiting for room behind unwritten answers",
        )
        assert len(conn.outgoing) <= server.server.max_inflight
        assert conn.outgoing_bytes <= server.server.max_outgoing_bytes
        transport = conn.ws.transport
        _low, high = transport.get_write_buffer_limits()
        assert transport.get_write_buffer_size() <= high + 2 * (size + 1024)
        seen: set[int] = set()
        while len(seen) < n:
            async with asyncio.timeout(DEADLINE_S):
                answer = _DEC.decode(await ws.recv(decode=False))
            assert len(answer["result"]["events"][0]["content"]) == size
            seen.add(answer["id"])
        assert seen == set(range(n))
    finally:
        await ws.close()
