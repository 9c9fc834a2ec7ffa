"""The server's front door on a real server and real sockets (issue 33, findings 1, 2, 5
and 10): the handshake on the installed websockets, the Origin check, handshakes in
progress apart from connection slots, 503 with Retry-After, the idle timeout (pings and
quiet subscriptions do not keep a connection), and no answer naming a version."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from session_server.client import SessionClient
from tests.support.plain_http import http_get
from tests.support.server import RunningServer, make_agents, running_server

AGENT = "front"


def own_origin(url: str) -> str:
    return "http://" + url.removeprefix("ws://")


async def call(ws: ClientConnection, method: str, params: dict[str, object]) -> object:
    await ws.send(
        msgspec.json.encode({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    )
    while True:
        answer = msgspec.json.decode(await ws.recv())
        if answer.get("id") == 1:
            assert "error" not in answer, answer
            return answer["result"]


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "memory") as running:
        await make_agents(running.registry, AGENT)
        yield running


# -- finding 1: the handshake works on the installed websockets ------------------------------


async def test_a_handshake_succeeds_on_the_installed_websockets(server: RunningServer) -> None:
    async with connect(f"{server.url}/v1/agents/{AGENT}") as ws:
        assert ws.response.status_code == 101
        assert await call(ws, "session.list", {}) is not None


# -- finding 10: no answer names the Python or websockets version ----------------------------


async def test_no_answer_carries_a_server_header(tmp_path: Path) -> None:
    async with running_server(tmp_path / "memory", tokens=["tok"]) as running:
        async with connect(
            f"{running.url}/v1", additional_headers={"Authorization": "Bearer tok"}
        ) as ws:
            assert "Server" not in ws.response.headers
        with pytest.raises(InvalidStatus) as refused:
            await connect(f"{running.url}/v1")
        assert refused.value.response.status_code == 401
        assert "Server" not in refused.value.response.headers
        for path in ("/healthz", "/", "/nowhere"):
            answer = await http_get(running.url, path)
            assert "server" not in answer.headers, path


# -- finding 2: browser origins ----------------------------------------------------------------


async def test_another_origin_is_refused_403_on_websocket_and_http(server: RunningServer) -> None:
    evil = {"Origin": "http://evil.example"}
    with pytest.raises(InvalidStatus) as refused:
        await connect(f"{server.url}/v1/agents/{AGENT}", additional_headers=evil)
    assert refused.value.response.status_code == 403
    assert b"--allow-origin" in refused.value.response.body
    for path in ("/healthz", "/", "/metrics"):
        answer = await http_get(server.url, path, evil)
        assert answer.status == 403, path
    # Same host, another port: another origin.
    host = server.url.removeprefix("ws://").rsplit(":", 1)[0]
    other_port = {"Origin": f"http://{host}:1"}
    with pytest.raises(InvalidStatus):
        await connect(f"{server.url}/v1", additional_headers=other_port)


async def test_no_origin_and_the_own_origin_pass(server: RunningServer) -> None:
    async with connect(f"{server.url}/v1/agents/{AGENT}") as ws:
        await call(ws, "session.list", {})
    own = {"Origin": own_origin(server.url)}
    async with connect(f"{server.url}/v1/agents/{AGENT}", additional_headers=own) as ws:
        await call(ws, "session.list", {})
    assert (await http_get(server.url, "/healthz")).status == 200


async def test_allowed_origins_pass_and_may_read_http_answers(tmp_path: Path) -> None:
    async with running_server(
        tmp_path / "memory", allow_origins=["http://app.example:3000"]
    ) as running:
        allowed = {"Origin": "http://APP.example:3000"}
        async with connect(f"{running.url}/v1", additional_headers=allowed):
            pass
        answer = await http_get(running.url, "/healthz", allowed)
        assert answer.status == 200
        assert answer.headers["access-control-allow-origin"] == "http://APP.example:3000"
        with pytest.raises(InvalidStatus) as refused:
            await connect(f"{running.url}/v1", additional_headers={"Origin": "http://app.example"})
        assert refused.value.response.status_code == 403
    async with (
        running_server(tmp_path / "memory", allow_origins=["*"]) as running,
        connect(f"{running.url}/v1", additional_headers={"Origin": "null"}) as ws,
    ):
        assert ws.response.status_code == 101


# -- finding 5: handshakes cannot lock others out ------------------------------------------


async def hold_silent(url: str, count: int) -> list[asyncio.StreamWriter]:
    """``count`` TCP connections that never send a request."""
    host, port = url.removeprefix("ws://").rsplit(":", 1)
    writers = []
    for _ in range(count):
        _reader, writer = await asyncio.open_connection(host, int(port))
        writers.append(writer)
    return writers


async def test_an_unauthenticated_flood_does_not_stop_a_token_holder(tmp_path: Path) -> None:
    async with running_server(
        tmp_path / "memory", tokens=["tok"], max_connections=2, max_handshakes=8
    ) as running:
        silent = await hold_silent(running.url, 30)
        try:
            refusals = await asyncio.gather(
                *(connect(f"{running.url}/v1") for _ in range(20)), return_exceptions=True
            )
            # Refused (401), or dropped for a newer handshake: none is let in.
            assert not [r for r in refusals if not isinstance(r, Exception)]
            assert any(
                isinstance(r, InvalidStatus) and r.response.status_code == 401 for r in refusals
            )
            silent += await hold_silent(running.url, 30)
            token = {"Authorization": "Bearer tok"}
            async with connect(f"{running.url}/v1", additional_headers=token) as ws:
                assert ws.response.status_code == 101
            assert len(running.server.gate.pending) <= 8
        finally:
            for writer in silent:
                writer.close()


async def test_a_full_server_answers_503_with_retry_after(tmp_path: Path) -> None:
    async with running_server(tmp_path / "memory", tokens=["tok"], max_connections=1) as running:
        token = {"Authorization": "Bearer tok"}
        async with connect(f"{running.url}/v1", additional_headers=token):
            with pytest.raises(InvalidStatus) as refused:
                await connect(f"{running.url}/v1", additional_headers=token)
            response = refused.value.response
            assert response.status_code == 503
            assert int(response.headers["Retry-After"]) >= 1
            # The token is checked before a slot is looked for: 401, not 503.
            with pytest.raises(InvalidStatus) as unauthenticated:
                await connect(f"{running.url}/v1")
            assert unauthenticated.value.response.status_code == 401
        async with connect(f"{running.url}/v1", additional_headers=token):
            pass  # the slot came back


async def test_a_handshake_that_never_completes_is_dropped_at_the_deadline(
    tmp_path: Path,
) -> None:
    async with running_server(tmp_path / "memory", handshake_timeout=0.3) as running:
        host, port = running.url.removeprefix("ws://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"GET /v1 HTTP/1.1\r\nHost: t\r\n")  # never ends its head
        try:
            assert await asyncio.wait_for(reader.read(), 10) == b""
        finally:
            writer.close()


async def closed_code(ws: ClientConnection) -> tuple[int | None, str | None]:
    """Wait (at most 10 s) for the server to close ``ws``; its close code and reason."""
    await asyncio.wait_for(ws.wait_closed(), 10)
    return ws.close_code, ws.close_reason


async def test_a_connection_that_only_answers_pings_is_closed_when_idle(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path / "memory", idle_timeout=0.3) as running,
        connect(f"{running.url}/v1", ping_interval=None) as ws,
    ):

        async def ping_until_closed() -> None:
            with contextlib.suppress(ConnectionClosed):
                while True:
                    await (await ws.ping())
                    await asyncio.sleep(0.05)  # pacing the pings, not a wait

        pinger = asyncio.create_task(ping_until_closed())
        assert await closed_code(ws) == (1000, "idle timeout")
        await pinger


async def test_a_quiet_subscription_does_not_keep_a_connection(tmp_path: Path) -> None:
    async with running_server(tmp_path / "memory", idle_timeout=0.3) as running:
        await make_agents(running.registry, AGENT)
        async with connect(f"{running.url}/v1/agents/{AGENT}") as ws:
            created = await call(ws, "session.create", {})
            assert isinstance(created, dict)
            await call(ws, "events.subscribe", {"session_id": created["session_id"]})
            assert await closed_code(ws) == (1000, "idle timeout")


async def test_a_subscription_with_recent_events_keeps_its_connection(tmp_path: Path) -> None:
    idle = 0.4
    async with running_server(tmp_path / "memory", idle_timeout=idle) as running:
        await make_agents(running.registry, AGENT)
        async with (
            SessionClient(running.url, AGENT) as writer,
            connect(f"{running.url}/v1/agents/{AGENT}") as ws,
        ):
            session_id = await writer.create_session()
            await call(ws, "events.subscribe", {"session_id": session_id})
            loop = asyncio.get_running_loop()
            start = loop.time()
            seen = 0
            while loop.time() - start < 3 * idle:  # three idle timeouts of events
                await writer.append_events(session_id, [{"content": f"e{seen}"}])
                while True:
                    note = msgspec.json.decode(await asyncio.wait_for(ws.recv(), 10))
                    if note.get("method") == "events.appended":
                        break
                seen += 1
                await asyncio.sleep(idle / 4)  # pacing the writes, not a wait
            assert ws.close_code is None, "open while its subscription delivered events"
            # The events stop: the connection is closed within two timeouts.
            assert await closed_code(ws) == (1000, "idle timeout")
