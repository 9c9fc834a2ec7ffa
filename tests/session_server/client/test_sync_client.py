"""``SyncSessionClient`` waits for a server that restarts (issue 33, finding 7): a
blocking agent calls on through a SIGTERM and a restart; a spent budget is one
``ServerUnavailable``, never a raw ``ConnectionRefusedError``."""

from __future__ import annotations

import asyncio
import signal
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from session_server.client import ServerUnavailable
from session_server.client.sync_client import SyncSessionClient
from session_server.values.errors import SessionServerError
from tests.support.restartable_process import RestartableProcess
from tests.support.server import free_port, turn_messages

AGENT = "blocking"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RestartableProcess]:
    running = RestartableProcess(tmp_path / "memory")
    await running.start()
    try:
        yield running
    finally:
        await running.stop(signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
async def test_a_blocking_agent_calls_on_through_a_restart(
    server: RestartableProcess, sig: int
) -> None:
    client = SyncSessionClient(server.url, AGENT)
    started, restarted = threading.Event(), threading.Event()

    def agent() -> tuple[str, int]:
        sid = client.create_session()
        turns, after = 0, 0
        while after < 5:
            ctx = client.build_context(sid)
            assert ctx.base_seq == 4 * turns
            client.persist_turn(sid, turn_messages(turns + 1), base_seq=ctx.base_seq)
            turns += 1
            started.set()
            after += restarted.is_set()
        return sid, turns

    try:
        running = asyncio.ensure_future(asyncio.to_thread(agent))
        await asyncio.to_thread(started.wait)
        await server.restart(sig)
        restarted.set()
        sid, turns = await running
        events = await client.acall("load_events", sid, limit=None, tail=False)
        assert [e.seq for e in events] == list(range(1, 4 * turns + 1))
    finally:
        await client.aclose()


def test_a_spent_budget_is_server_unavailable_not_a_raw_os_error() -> None:
    url = f"ws://127.0.0.1:{free_port()}"
    with (
        SyncSessionClient(url, AGENT, reconnect_budget=0.5) as client,
        pytest.raises(ServerUnavailable) as caught,
    ):
        client.list_sessions()
    assert isinstance(caught.value, SessionServerError)
    assert url in str(caught.value)


def test_retries_is_deprecated() -> None:
    with pytest.warns(DeprecationWarning, match="reconnect_budget"):
        SyncSessionClient("ws://127.0.0.1:1", AGENT, retries=3).close()
