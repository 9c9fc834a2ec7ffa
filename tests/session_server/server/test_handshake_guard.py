"""A header line over websockets' 8 KiB limit gets an answer (issue 13, item 8 follow-up):
an over-long ``Authorization`` is refused with 401 ``token too long``, another header with
431, and nothing is logged as a traceback. Before, the connection was dropped without an
answer. Real server, real sockets; ``HeadFilter`` is checked on every way of cutting the
bytes into chunks."""

from __future__ import annotations

import asyncio
import http
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus
from websockets.http11 import MAX_LINE_LENGTH

from session_server.server.handshake_guard import (
    HandshakeGate,
    HeadFilter,
    HeadRefusal,
    refusal_bytes,
)
from tests.support.plain_http import parse_answer
from tests.support.server import RunningServer, make_agents, running_server

HANDSHAKE = (
    "GET /v1/agents/a HTTP/1.1\r\nHost: test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "memory", tokens=["tok"]) as running:
        await make_agents(running.registry, "a")
        yield running


async def raw_handshake(url: str, extra: str) -> tuple[int, str]:
    host, port = url.removeprefix("ws://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write((HANDSHAKE + extra + "\r\n").encode())
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()
    answer = parse_answer(raw)
    return answer.status, answer.body


@pytest.mark.parametrize("size", [MAX_LINE_LENGTH, 20_000, 300_000])
async def test_an_over_long_token_is_401(
    server: RunningServer, size: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    status, body = await raw_handshake(server.url, f"Authorization: Bearer {'x' * size}\r\n")
    assert status == 401
    assert (
        body
        == f"401 Unauthorized: token too long (the Authorization header is over {MAX_LINE_LENGTH} bytes)\n"
    )
    assert not [r for r in caplog.records if r.exc_info], "no traceback"
    with pytest.raises(InvalidStatus) as refused:
        await connect(
            f"{server.url}/v1/agents/a",
            additional_headers={"Authorization": "Bearer " + "y" * size},
        )
    assert refused.value.response.status_code == 401


async def test_another_over_long_header_is_431(server: RunningServer) -> None:
    status, body = await raw_handshake(
        server.url, f"X-Padding: {'p' * 10_000}\r\nAuthorization: Bearer tok\r\n"
    )
    assert status == 431
    assert "'x-padding' is over" in body


async def test_headers_under_the_limit_pass_untouched(server: RunningServer) -> None:
    padding = "p" * (MAX_LINE_LENGTH - 100)
    async with connect(
        f"{server.url}/v1/agents/a",
        additional_headers={"Authorization": "Bearer tok", "X-Padding": padding},
    ) as ws:
        await ws.send('{"jsonrpc":"2.0","id":1,"method":"session.list"}')
        assert '"sessions":[]' in str(await ws.recv())


def test_head_filter_gives_the_same_bytes_however_they_are_cut() -> None:
    long_line = b"Authorization: Bearer " + b"z" * 50
    head = b"GET / HTTP/1.1\r\nHost: h\r\n" + long_line + b"\r\nX-A: 1\r\n\r\n"
    after = b"\x81\x05hello"
    expected = b"GET / HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n\r\n" + after
    data = head + after
    for size in (1, 2, 3, 7, 16, 64, len(data)):
        head_filter = HeadFilter(limit=40)
        out = b"".join(head_filter.feed(data[i : i + size]) for i in range(0, len(data), size))
        assert out == expected, size
        assert head_filter.oversized == "authorization" and head_filter.done
    untouched = HeadFilter(limit=40)
    assert (
        untouched.feed(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n") == b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"
    )
    assert untouched.oversized is None


# -- heads websockets would drop: answered 400/405/414/431 (issue 33, finding 10) ------------


async def raw_request(url: str, data: bytes) -> bytes:
    """Send ``data`` and read until the server closes (30 s at most)."""
    host, port = url.removeprefix("ws://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 30)
    finally:
        writer.close()


MALFORMED = [
    (b"POST /healthz HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n", 405, "method POST"),
    (b"DELETE /v1/agents/a HTTP/1.1\r\nHost: t\r\n\r\n", 405, "method DELETE"),
    (b"GARBAGE\r\n\r\n", 400, "malformed request line"),
    (b"GET / HTTP/1.0\r\nHost: t\r\n\r\n", 400, "HTTP/1.1 only"),
    (b"GET / HTTP/1.1\r\nHost t\r\n\r\n", 400, "malformed header line"),
    (b"GET / HTTP/1.1\r\nHost: t\r\n folded\r\n\r\n", 400, "malformed header line"),
    (b"GET / HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello", 400, "request body"),
    (b"GET / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n", 400, "request body"),
    (b"GET /" + b"p" * 10_000 + b" HTTP/1.1\r\nHost: t\r\n\r\n", 414, "request line"),
    (
        b"GET / HTTP/1.1\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(200)) + b"\r\n",
        431,
        "header lines",
    ),
]


@pytest.mark.parametrize(("data", "status", "reason"), MALFORMED)
async def test_a_malformed_head_gets_a_status(
    server: RunningServer,
    data: bytes,
    status: int,
    reason: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    raw = await raw_request(server.url, data)
    assert raw, "the connection was closed without an answer"
    answer = parse_answer(raw)
    assert answer.status == status
    assert reason in answer.body
    if status == 405:
        assert answer.headers["allow"] == "GET"
    assert "server" not in answer.headers
    await server.server.stop()  # every handshake handler has ended: all is logged
    assert not [r for r in caplog.records if r.exc_info], "no traceback"


@pytest.mark.parametrize(("data", "status", "reason"), MALFORMED)
def test_head_filter_refuses_however_the_bytes_are_cut(
    data: bytes, status: int, reason: str
) -> None:
    for size in (1, 5, 64, len(data)):
        head_filter = HeadFilter()
        handed = b"".join(head_filter.feed(data[i : i + size]) for i in range(0, len(data), size))
        assert head_filter.refusal is not None, size
        assert head_filter.refusal.status == status
        assert reason in head_filter.refusal.reason
        assert b"\r\n\r\n" not in handed, "a refused head is never handed on whole"


def test_refusal_bytes_is_a_complete_http_answer() -> None:
    raw = refusal_bytes(HeadRefusal(http.HTTPStatus.METHOD_NOT_ALLOWED, "method PUT"))
    answer = parse_answer(raw)
    assert answer.status == 405
    assert answer.headers["allow"] == "GET"
    assert answer.headers["connection"] == "close"
    assert int(answer.headers["content-length"]) == len(answer.body.encode())
    assert answer.body == "405 Method Not Allowed: method PUT\n"


# -- HandshakeGate: handshakes in progress apart from admitted connections ---------------------


def test_the_gate_drops_the_oldest_handshake_beyond_its_bound() -> None:
    gate: HandshakeGate[str] = HandshakeGate(max_handshakes=2, max_connections=1)
    assert gate.arrive("a") is None
    assert gate.arrive("b") is None
    assert gate.arrive("c") == "a"
    assert list(gate.pending) == ["b", "c"] and gate.evicted == 1
    gate.decided("b")
    assert gate.arrive("d") is None
    assert list(gate.pending) == ["c", "d"]


def test_the_gate_admits_up_to_max_connections_and_frees_slots_when_gone() -> None:
    gate: HandshakeGate[str] = HandshakeGate(max_handshakes=8, max_connections=2)
    for key in "abc":
        gate.arrive(key)
        gate.decided(key)
    assert gate.admit("a") and gate.admit("b")
    assert not gate.admit("c")
    assert gate.admit("a"), "admitting again takes no second slot"
    gate.gone("a")
    assert gate.admit("c")
    assert gate.admitted == {"b", "c"} and gate.live == {"b", "c"}


def test_pending_handshakes_do_not_take_connection_slots() -> None:
    gate: HandshakeGate[str] = HandshakeGate(max_handshakes=100, max_connections=1)
    for i in range(50):
        gate.arrive(f"silent-{i}")
    gate.arrive("holder")
    gate.decided("holder")
    assert gate.admit("holder")
