"""The request intake on a real server and real sockets: many connections in the middle
of a large frame at once are admitted within the permit pool, every one of them
completes (paused connections resume), and the server's own figures (/metrics) never
exceed the documented bound."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec
from websockets.asyncio.client import ClientConnection, connect
from websockets.frames import Frame, Opcode

from session_server.client import SessionClient
from tests.support.plain_http import http_get
from tests.support.server import RunningServer, running_server

MAX_FRAME = 1024 * 1024
THRESHOLD = 64 * 1024
PERMITS = 2
CONNECTIONS = 8
READ_CHUNK = 256 * 1024  # the most one socket read adds past the threshold
AGENT = "intake"


def _bound() -> int:
    """The intake bound of docs/operations.md ("Limits"): permits x (max frame + threshold) +
    connections x (threshold + one read)."""
    return PERMITS * (MAX_FRAME + THRESHOLD) + CONNECTIONS * (THRESHOLD + READ_CHUNK)


def _append_frame(session_id: str, size: int) -> bytes:
    """A masked text frame (as a client sends it) appending ``size`` characters."""
    payload = msgspec.json.encode(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "events.append",
            "params": {
                "session_id": session_id,
                "events": [{"content": os.urandom(size // 2).hex()}],
            },
        }
    )
    return Frame(Opcode.TEXT, payload).serialize(mask=True, extensions=[])


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


async def _until(condition: Callable[[], bool]) -> None:
    """Wait for a condition of the server's state (polled; at most 20 s)."""
    async with asyncio.timeout(20):
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.005)


@contextlib.asynccontextmanager
async def _one_permit_server(
    tmp_path: Path, sessions: int = 1, **options: Any
) -> AsyncIterator[RunningServer]:
    """A server with one large-frame permit and sessions ``s0``, ``s1``, ... of ``AGENT``."""
    async with running_server(
        tmp_path / "memory",
        max_frame_bytes=MAX_FRAME,
        large_frame_threshold=THRESHOLD,
        large_frame_permits=1,
        **options,
    ) as running:
        async with SessionClient(running.url, AGENT) as setup:
            for i in range(sessions):
                await setup.create_session(session_id=f"s{i}")
        yield running


async def test_connections_mid_frame_wait_for_permits_and_all_complete(tmp_path: Path) -> None:
    async with running_server(
        tmp_path / "memory",
        max_frame_bytes=MAX_FRAME,
        large_frame_threshold=THRESHOLD,
        large_frame_permits=PERMITS,
    ) as running:
        permits = running.server.permits
        held = running.server.intake_held
        assert permits.count == PERMITS
        async with SessionClient(running.url, AGENT) as setup:
            for i in range(CONNECTIONS):
                await setup.create_session(session_id=f"s{i}")
        frames = [_append_frame(f"s{i}", 900_000) for i in range(CONNECTIONS)]
        conns: list[ClientConnection] = [
            await connect(f"{running.url}/v1/agents/{AGENT}", max_size=None)
            for _ in range(CONNECTIONS)
        ]
        try:
            # Every connection sends the first half of its frame: all are mid-frame, past
            # the threshold; two hold the permits, the others are not read.
            for ws, frame in zip(conns, frames, strict=True):
                ws.transport.write(frame[: len(frame) // 2])
            await _until(
                lambda: permits.in_use == PERMITS and permits.waiting == CONNECTIONS - PERMITS
            )
            assert held.total <= _bound()
            # Then the rest: holders complete and hand their permits on, in turn.
            for ws, frame in zip(conns, frames, strict=True):
                ws.transport.write(frame[len(frame) // 2 :])
            async with asyncio.timeout(60):
                answers = [msgspec.json.decode(await ws.recv(decode=False)) for ws in conns]
        finally:
            for ws in conns:
                await ws.close()
        assert all("result" in a for a in answers), answers
        assert permits.waits >= CONNECTIONS - PERMITS  # they really waited
        scraped = (await http_get(running.url, "/metrics")).body
        assert _metric(scraped, "session_server_frame_permits") == PERMITS
        assert _metric(scraped, "session_server_frame_permits_peak") == PERMITS
        assert _metric(scraped, "session_server_intake_bytes_peak") <= _bound()
        assert _metric(scraped, "session_server_intake_bytes_peak") > PERMITS * 900_000
        await _until(lambda: permits.in_use == 0 and held.total == 0)
        async with SessionClient(running.url, AGENT) as check:
            for i in range(CONNECTIONS):
                events = await check.load_events(f"s{i}")
                assert len(events) == 1 and len(events[0].content) == 900_000


async def test_a_connection_that_leaves_mid_frame_gives_its_permit_back(tmp_path: Path) -> None:
    async with _one_permit_server(tmp_path) as running:
        permits = running.server.permits
        held = running.server.intake_held
        frame = _append_frame("s0", 900_000)
        quitter = await connect(f"{running.url}/v1/agents/{AGENT}", max_size=None)
        quitter.transport.write(frame[: len(frame) // 2])
        await _until(lambda: permits.in_use == 1)
        waiter = await connect(f"{running.url}/v1/agents/{AGENT}", max_size=None)
        waiter.transport.write(frame[: len(frame) // 2])
        await _until(lambda: permits.waiting == 1)
        quitter.transport.abort()  # the holder goes away mid-frame
        waiter.transport.write(frame[len(frame) // 2 :])
        async with asyncio.timeout(30):
            answer = msgspec.json.decode(await waiter.recv(decode=False))
        await waiter.close()
        assert "result" in answer, answer
        await _until(lambda: permits.in_use == 0 and held.total == 0 and not permits.waiting)


async def test_small_frames_need_no_permit(tmp_path: Path) -> None:
    async with running_server(
        tmp_path / "memory", max_frame_bytes=MAX_FRAME, large_frame_threshold=THRESHOLD
    ) as running:
        async with SessionClient(running.url, AGENT) as client:
            await client.create_session(session_id="s")
            await asyncio.gather(
                *(client.append_events("s", [{"content": "x" * 1000}]) for _ in range(50))
            )
        assert running.server.permits.peak == 0
        assert running.server.permits.waits == 0


async def test_a_permit_holder_whose_reader_takes_nothing_is_dropped(tmp_path: Path) -> None:
    """A connection that got a permit mid-frame and then stops taking messages (what a
    client that does not read its answers causes once its window is full) would keep
    the permit for good: it is dropped after ``large_frame_hold_timeout``."""
    async with _one_permit_server(tmp_path, large_frame_hold_timeout=0.2) as running:
        permits = running.server.permits
        held = running.server.intake_held
        frame = _append_frame("s0", 900_000)
        holder = await connect(f"{running.url}/v1/agents/{AGENT}", max_size=None)
        holder.transport.write(frame[: len(frame) // 2])
        await _until(lambda: permits.in_use == 1)
        # The reader stops taking messages, as when the window is full of unread answers.
        holding = next(c for c in running.server._connections if c.ws.permit)
        holding.ws.ready(False)
        async with asyncio.timeout(10):
            await holder.wait_closed()
        await _until(lambda: permits.in_use == 0 and held.total == 0)
        other = await connect(f"{running.url}/v1/agents/{AGENT}", max_size=None)
        other.transport.write(frame)
        async with asyncio.timeout(30):
            answer = msgspec.json.decode(await other.recv(decode=False))
        await other.close()
        assert "result" in answer, answer


def _append_request(rid: int, session_id: str, size: int) -> bytes:
    """A masked text frame appending ``size`` characters, answered with ``rid``."""
    payload = msgspec.json.encode(
        {
            "jsonrpc": "2.0",
            "id": rid,
            "method": "events.append",
            "params": {"session_id": session_id, "events": [{"content": "x" * size}]},
        }
    )
    return Frame(Opcode.TEXT, payload).serialize(mask=True, extensions=[])


async def test_large_and_small_frames_interleaved_leave_the_rule_at_rest(tmp_path: Path) -> None:
    """Each connection sends a run of frames of random sizes (small, just under the
    threshold, over it) in random slices, so reads end mid-frame and hold several frames
    at once, while one permit serves them all. The rule's common case (small, nothing to
    undo) returns early; whatever the order, every frame is answered, the intake stays
    within its bound and every connection ends with no permit, no place in the queue,
    no pause and no stall timer: what the full rule leaves."""
    rng = random.Random(9)
    sizes = (100, THRESHOLD - 2_000, 3 * THRESHOLD)
    connections = 4
    async with _one_permit_server(tmp_path, sessions=connections) as running:
        permits = running.server.permits
        held = running.server.intake_held
        for _round in range(3):
            conns = [
                await connect(f"{running.url}/v1/agents/{AGENT}", max_size=None)
                for _ in range(connections + 1)
            ]
            # A connection sending pings only: its pong says the server's loop read its
            # sockets after the slices written before the ping.
            control = conns.pop()
            try:
                plans = [[rng.choice(sizes) for _ in range(6)] for _ in range(connections)]
                streams = [
                    b"".join(_append_request(j, f"s{i}", size) for j, size in enumerate(plan))
                    for i, plan in enumerate(plans)
                ]
                cuts = [sorted(rng.sample(range(1, len(s)), 5)) for s in streams]
                for k in range(6):  # slice k of every stream, connection after connection
                    for ws, stream, cut in zip(conns, streams, cuts, strict=True):
                        bounds = [0, *cut, len(stream)]
                        ws.transport.write(stream[bounds[k] : bounds[k + 1]])
                    # The server reads between the slices (a read ends mid-frame).
                    await asyncio.wait_for(await control.ping(), timeout=60)
                async with asyncio.timeout(60):
                    for ws, plan in zip(conns, plans, strict=True):
                        answers = [msgspec.json.decode(await ws.recv(decode=False)) for _ in plan]
                        assert all("result" in a for a in answers), answers
                        assert sorted(a["id"] for a in answers) == list(range(len(plan)))
                await _until(lambda: permits.in_use == 0 and held.total == 0)
                assert not permits.waiting
                for conn in running.server._connections:
                    intake = conn.ws
                    assert not (intake.permit or intake.waiting or intake._intake_paused)
                    assert intake._stall is None and intake.counted == 0
            finally:
                for ws in [*conns, control]:
                    await ws.close()
        assert 0 < permits.peak <= 1 and held.peak <= _bound()


async def test_a_permit_taken_for_small_frames_is_given_back_once_they_are_claimed(
    tmp_path: Path,
) -> None:
    """Small frames arriving together hold more than the threshold: the connection takes
    the permit, then its reader claims them one by one (none needs it). Once the bytes
    held are under the threshold again the permit goes back to the pool (the full rule;
    the early return of the common case must not skip it), so another connection's large
    frame is served while the first stays open and idle."""
    async with _one_permit_server(tmp_path) as running:
        permits = running.server.permits
        held = running.server.intake_held
        frames = 10
        async with (
            connect(f"{running.url}/v1/agents/{AGENT}", max_size=None) as idle,
            connect(f"{running.url}/v1/agents/{AGENT}", max_size=None) as large,
        ):
            size = THRESHOLD // 3
            idle.transport.write(b"".join(_append_request(i, "s0", size) for i in range(frames)))
            async with asyncio.timeout(30):
                answers = [
                    msgspec.json.decode(await idle.recv(decode=False)) for _ in range(frames)
                ]
            assert sorted(a["id"] for a in answers) == list(range(frames)), answers
            assert permits.peak == 1  # the frames together took the permit
            await _until(lambda: permits.in_use == 0 and held.total == 0)
            large.transport.write(_append_request(frames, "s0", 3 * THRESHOLD))
            async with asyncio.timeout(30):
                answer = msgspec.json.decode(await large.recv(decode=False))
            assert answer["id"] == frames and "result" in answer, answer
