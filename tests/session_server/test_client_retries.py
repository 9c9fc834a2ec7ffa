"""Clients retry a handshake refused for now (issue 13, item 8 follow-up).

A real server with ``max_connections=1`` answers HTTP 503 while one connection is held;
``SessionClient.connect``, ``SyncSessionClient`` and ``follow`` retry with backoff and get
through once the connection is released (they used to raise at once). The refusal is
observed through the server's own log line, not by timing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from session_server.client import SessionClient
from session_server.core.errors import UnavailableError
from session_server.follow import follow
from session_server.sync_client import SyncSessionClient
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
    waiting = asyncio.create_task(
        SessionClient(server.url, AGENT, connect_retries=10, retry_delay=0.02).connect()
    )
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
        with pytest.raises(UnavailableError) as refused:
            await SessionClient(server.url, AGENT, connect_retries=0).connect()
        assert refused.value.data == {"http_status": 503, "retryable": True}


async def test_sync_client_retries_a_503(server: RunningServer, refusals: _Refusals) -> None:
    holder = await SessionClient(server.url, AGENT).connect()
    await holder.create_session(session_id="s")
    client = SyncSessionClient(server.url, AGENT, retries=8, connect_retries=0)
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
    client = SessionClient(server.url, AGENT, connect_retries=10, retry_delay=0.05)
    connecting = asyncio.create_task(client.connect())
    try:
        await server.start()  # the first attempt was made before: connect() began first
        await connecting
        await client.create_session(session_id="s")
        assert [s["id"] for s in await client.list_sessions()] == ["s"]
    finally:
        await client.close()
        await server.stop()
