"""Clients retry a handshake refused for now (issue 13, item 8 follow-up).

A real server with ``max_connections=1`` answers HTTP 503 while one connection is held;
``SessionClient.connect``, ``SyncSessionClient`` and ``follow`` retry with backoff and get
through once the connection is released (they used to raise at once). The refusal is
observed through the server's own log line, not by timing. A call whose connection is lost
after it was sent is sent again only when running it twice is safe (issue 33, finding 7:
``OutcomeUnknownError`` otherwise, ``ServerUnavailable`` once the budget is spent).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve

from session_server.client import OutcomeUnknownError, ServerUnavailable, SessionClient
from session_server.client.follow import follow
from session_server.client.sync_client import SyncSessionClient
from session_server.values.errors import UnavailableError
from tests.support.server import RestartableServer, RunningServer, running_server

AGENT = "retrying"


class _Refusals(logging.Handler):
    """Sets ``seen`` when the server logs that it refuses connections."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(logging.WARNING)
        self.loop = loop
        self.seen = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("refusing connections"):
            self.loop.call_soon_threadsafe(self.seen.set)


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "memory", max_connections=1) as running:
        yield running


@pytest.fixture
async def refusals() -> AsyncIterator[_Refusals]:
    handler = _Refusals(asyncio.get_running_loop())
    logger = logging.getLogger("session_server.server")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


async def test_session_client_retries_a_503(server: RunningServer, refusals: _Refusals) -> None:
    holder = await SessionClient(server.url, AGENT).connect()
    await holder.create_session(session_id="s")
    waiting = asyncio.create_task(SessionClient(server.url, AGENT, retry_delay=0.02).connect())
    await refusals.seen.wait()  # it was refused at least once
    await holder.close()
    client = await waiting
    try:
        assert [s["id"] for s in await client.list_sessions()] == ["s"]
    finally:
        await client.close()


async def test_without_retries_the_503_is_raised(server: RunningServer) -> None:
    async with SessionClient(server.url, AGENT) as holder:
        await holder.create_session(session_id="s")
        with pytest.raises(ServerUnavailable) as refused:
            await SessionClient(server.url, AGENT, connect_retries=0).connect()
        assert isinstance(refused.value, UnavailableError)
        cause = refused.value.__cause__
        assert isinstance(cause, UnavailableError)
        assert cause.data == {"http_status": 503, "retryable": True, "retry_after": 1}


async def test_sync_client_retries_a_503(server: RunningServer, refusals: _Refusals) -> None:
    holder = await SessionClient(server.url, AGENT).connect()
    await holder.create_session(session_id="s")
    client = SyncSessionClient(server.url, AGENT, retry_delay=0.02)
    try:
        call = asyncio.ensure_future(client.acall("get_session", "s"))
        await refusals.seen.wait()
        await holder.close()
        assert (await call)["id"] == "s"
    finally:
        await client.aclose()


async def test_follow_retries_a_503(server: RunningServer, refusals: _Refusals) -> None:
    holder = await SessionClient(server.url, AGENT).connect()
    await holder.create_session(session_id="s")
    await holder.append_events("s", [{"content": "first"}])
    events = follow(server.url, AGENT, "s", retry_delay=0.02, max_attempts=20)
    first = asyncio.ensure_future(anext(events))
    await refusals.seen.wait()
    await holder.close()
    try:
        assert (await first).content == "first"
    finally:
        await events.aclose()


async def test_session_client_retries_a_refused_connection(tmp_path: Path) -> None:
    server = RestartableServer(tmp_path / "memory")  # its port is chosen, nothing listens
    client = SessionClient(server.url, AGENT, retry_delay=0.05)
    connecting = asyncio.create_task(client.connect())
    try:
        await server.start()  # the first attempt was made before: connect() began first
        await connecting
        await client.create_session(session_id="s")
        assert [s["id"] for s in await client.list_sessions()] == ["s"]
    finally:
        await client.close()
        await server.stop()


class _Dropper:
    """A WebSocket peer on 127.0.0.1 that reads each request, records its method, and
    drops the connection without answering: the call was sent and may have run."""

    def __init__(self) -> None:
        self.methods: list[str] = []

    async def handler(self, ws: ServerConnection) -> None:
        request = json.loads(await ws.recv())
        self.methods.append(request["method"])
        ws.transport.abort()


@pytest.mark.parametrize(
    ("call", "kwargs", "method"),
    [
        ("get_session", {"session_id": "s"}, "session.get"),
        ("persist_turn", {"session_id": "s", "messages": []}, "turn.persist"),
        ("update_session", {"session_id": "s", "metadata": {}}, "session.update"),
        ("create_session", {}, "session.create"),
    ],
)
async def test_a_call_safe_to_resend_is_sent_again_until_the_budget_is_spent(
    call: str, kwargs: dict[str, Any], method: str
) -> None:
    dropper = _Dropper()
    async with serve(dropper.handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        client = SyncSessionClient(f"ws://127.0.0.1:{port}", AGENT, reconnect_budget=0.5)
        try:
            with pytest.raises(ServerUnavailable):
                await client.acall(call, **kwargs)
        finally:
            await asyncio.to_thread(client.close)
    assert len(dropper.methods) >= 2 and set(dropper.methods) == {method}


@pytest.mark.parametrize(
    ("call", "kwargs", "method"),
    [
        ("create_session", {"session_id": "s"}, "session.create"),
        ("delete_session", {"session_id": "s"}, "session.delete"),
        ("clear_session", {"session_id": "s"}, "session.clear"),
        ("delete_events", {"session_id": "s", "event_ids": ["e"]}, "events.delete"),
        ("pop_event", {"session_id": "s"}, "events.pop"),
        ("pop_event", {"session_id": "s", "event_id": "e"}, "events.pop"),
        ("compact", {"session_id": "s"}, "memory.compact"),
    ],
)
async def test_a_call_unsafe_to_resend_is_sent_once_and_reported_in_doubt(
    call: str, kwargs: dict[str, Any], method: str
) -> None:
    dropper = _Dropper()
    async with serve(dropper.handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        client = SyncSessionClient(f"ws://127.0.0.1:{port}", AGENT, reconnect_budget=0.5)
        try:
            with pytest.raises(OutcomeUnknownError, match="may or may not have been applied"):
                await client.acall(call, **kwargs)
        finally:
            await asyncio.to_thread(client.close)
    assert dropper.methods == [method]
