"""``RpcConnection`` reconnects within its budget (issue 33, finding 7), against a real
``session-server serve`` subprocess restarted on the same port.

A client started before its server waits for it; a loop of calls rides through a SIGTERM
or a SIGKILL and a restart with no call failing and no turn lost or written twice; a
spent budget is one ``ServerUnavailable`` naming the URL and the time; a write that may
not be sent twice, in flight at a SIGKILL, is ``OutcomeUnknownError``; subscriptions
resume after the last seq they received. Synchronisation is by the server's printed
address, the client's log of a failed attempt and a TCP relay that reports a request in
flight, never by sleeping.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from session_server.client import (
    ConnectionLostError,
    OutcomeUnknownError,
    ServerUnavailable,
    SessionClient,
)
from session_server.values.errors import SessionServerError
from tests.support.relay import Relay
from tests.support.restartable_process import RestartableProcess as Server
from tests.support.server import free_port, turn_messages

AGENT = "reconnecting"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    running = Server(tmp_path / "memory")
    await running.start()
    try:
        yield running
    finally:
        await running.stop(signal.SIGKILL)


class _Attempts(logging.Handler):
    """Sets ``failed`` when the client logs an attempt that could not reach the server."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(logging.INFO)
        self.loop = loop
        self.failed = asyncio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("cannot reach "):
            self.loop.call_soon_threadsafe(self.failed.set)


@pytest.fixture
async def attempts() -> AsyncIterator[_Attempts]:
    handler = _Attempts(asyncio.get_running_loop())
    logger = logging.getLogger("session_server.client")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


async def test_a_client_started_before_its_server_waits_and_succeeds(
    tmp_path: Path, attempts: _Attempts
) -> None:
    server = Server(tmp_path / "memory")
    client = SessionClient(server.url, AGENT)
    connecting = asyncio.create_task(client.connect())
    try:
        await attempts.failed.wait()  # refused at least once: nothing listens yet
        assert not connecting.done()
        await server.start()
        await connecting
        sid = await client.create_session()
        await client.persist_turn(sid, turn_messages(1))
        assert [e.seq for e in await client.load_events(sid)] == [1, 2, 3, 4]
    finally:
        await client.close()
        await server.stop(signal.SIGKILL)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
async def test_a_loop_of_calls_rides_through_a_restart(server: Server, sig: int) -> None:
    async with SessionClient(server.url, AGENT) as client:
        sid = await client.create_session()
        started, restarted = asyncio.Event(), asyncio.Event()
        turns = 0

        async def loop() -> None:
            nonlocal turns
            after = 0  # turns persisted once the server is back
            while after < 5:
                ctx = await client.build_context(sid)  # a read
                assert ctx.base_seq == 4 * turns
                await client.persist_turn(sid, turn_messages(turns + 1), base_seq=ctx.base_seq)
                turns += 1
                started.set()
                after += restarted.is_set()

        running = asyncio.create_task(loop())
        await started.wait()
        await server.restart(sig)  # the loop calls on meanwhile: each call waits
        restarted.set()
        await running
        events = await client.load_events(sid, limit=None, tail=False)
    assert [e.seq for e in events] == list(range(1, 4 * turns + 1))
    questions = [e.content for e in events if e.action == "user_message"]
    assert questions == [f"question {n}" for n in range(1, turns + 1)]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
async def test_subscriptions_resume_after_the_last_seq_they_received(
    server: Server, sig: int
) -> None:
    async with SessionClient(server.url, AGENT) as writer:
        sid = await writer.create_session()
    reader = SessionClient(server.url, AGENT)
    try:
        sub = await (await reader.connect()).subscribe(sid)
        seen: list[int] = []

        async def take(n: int) -> None:
            while len(seen) < n:
                seen.append((await anext(sub)).seq)

        async with SessionClient(server.url, AGENT) as writer:
            await writer.persist_turn(sid, turn_messages(1))
            await take(4)
        await server.stop(sig)
        await server.start()
        async with SessionClient(server.url, AGENT) as writer:  # before or after the
            await writer.persist_turn(sid, turn_messages(2))  # reader is back: no matter
            await take(8)
            await writer.persist_turn(sid, turn_messages(3))
            await take(12)
        assert seen == list(range(1, 13))
        await sub.close()
    finally:
        await reader.close()


async def test_a_spent_budget_is_one_clear_error_naming_the_url_and_the_time() -> None:
    url = f"ws://127.0.0.1:{free_port()}"  # nothing listens there
    client = SessionClient(url, AGENT, reconnect_budget=1.0)
    loop = asyncio.get_running_loop()
    began = loop.time()
    with pytest.raises(ServerUnavailable) as caught:
        await client.connect()
    waited = loop.time() - began
    assert 1.0 <= waited < 3.0  # the budget, plus the last attempt (a loaded machine)
    error = caught.value
    assert isinstance(error, SessionServerError) and error.code == -32005
    assert f"{url}/v1/agents/{AGENT}" in str(error) and "unavailable" in str(error)
    assert error.data is not None and error.data["waited"] >= 1.0
    assert error.data["attempts"] >= 3
    assert isinstance(error.__cause__, ConnectionRefusedError)


async def test_a_server_that_stays_down_is_one_clear_error_for_the_next_call(
    server: Server,
) -> None:
    async with SessionClient(server.url, AGENT, reconnect_budget=1.0) as client:
        sid = await client.create_session()
        await server.stop(signal.SIGKILL)
        with pytest.raises(ServerUnavailable, match=r"unavailable: no connection after"):
            await client.get_session(sid)


async def test_a_write_without_key_in_flight_at_a_kill_is_reported_in_doubt(
    server: Server,
) -> None:
    async with Relay(server.port) as relay, SessionClient(relay.url, AGENT) as client:
        sid = await client.create_session()
        relay.request_forwarded.clear()
        deleting = asyncio.create_task(client.delete_session(sid))
        await relay.request_forwarded.wait()
        await server.stop(signal.SIGKILL)
        with pytest.raises(OutcomeUnknownError, match="may or may not have been applied"):
            await deleting
        error = deleting.exception()
        assert isinstance(error, OutcomeUnknownError) and isinstance(error, ConnectionLostError)
        assert error.data == {
            "method": "session.delete",
            "url": f"{relay.url}/v1/agents/{AGENT}",
            "reason": "outcome_unknown",
        }
        await server.start()
        await client.list_sessions()  # the client goes on once the server is back


async def test_a_keyed_write_in_flight_at_a_kill_is_sent_again_and_written_once(
    server: Server,
) -> None:
    async with Relay(server.port) as relay, SessionClient(relay.url, AGENT) as client:
        sid = await client.create_session()
        relay.request_forwarded.clear()
        persisting = asyncio.create_task(client.persist_turn(sid, turn_messages(1)))
        await relay.request_forwarded.wait()
        await server.stop(signal.SIGKILL)
        await server.start()
        result = await persisting
        assert result.seqs == [1, 2, 3, 4]
        events = await client.load_events(sid, limit=None)
    assert [e.seq for e in events] == [1, 2, 3, 4]


async def test_a_create_in_flight_at_a_kill_is_sent_again_and_creates_one_session(
    server: Server,
) -> None:
    async with Relay(server.port) as relay, SessionClient(relay.url, AGENT) as client:
        await client.create_session(session_id="first")  # the agent exists
        relay.request_forwarded.clear()
        creating = asyncio.create_task(client.create_session({"n": 1}))
        await relay.request_forwarded.wait()
        await server.stop(signal.SIGKILL)
        await server.start()
        sid = await creating
        sessions = await client.list_sessions()
    assert sorted(s["id"] for s in sessions) == sorted(["first", sid])
    assert next(s for s in sessions if s["id"] == sid)["metadata"] == {"n": 1}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
async def test_a_server_that_stops_under_calls_leaves_no_unretrieved_future(
    server: Server, sig: int, caplog: pytest.LogCaptureFixture
) -> None:
    """Calls still sending large frames when the connection dropped had their answer
    futures failed by the reader and never awaited: "Future exception was never
    retrieved" at garbage collection."""
    caplog.set_level(logging.ERROR, logger="asyncio")
    client = SessionClient(server.url, AGENT, reconnect_budget=0.0)
    await client.connect()
    sid = await client.create_session()
    large = {"blob": "x" * 2_000_000}
    calls = [asyncio.ensure_future(client.update_session(sid, large)) for _ in range(20)]
    server.send_signal(sig)
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    assert all(isinstance(o, dict | ConnectionLostError) for o in outcomes), outcomes
    await client.close()
    del calls, outcomes, client
    gc.collect()
    assert not [r for r in caplog.records if "never retrieved" in r.getMessage()]


async def test_close_ends_a_connect_that_waits_for_the_server() -> None:
    client = SessionClient(f"ws://127.0.0.1:{free_port()}", AGENT)
    connecting = asyncio.create_task(client.connect())
    calling = asyncio.create_task(client.list_sessions())
    await client.close()
    for waiting in (connecting, calling):
        with pytest.raises(ConnectionLostError, match="client is closed"):
            await waiting
