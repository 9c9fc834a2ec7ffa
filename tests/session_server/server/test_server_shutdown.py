"""Graceful stop of a real ``python -m session_server serve`` subprocess with writes in flight.

SIGTERM arrives while four clients have many pipelined ``turn.persist`` calls outstanding.
Every call must end with an answer or a connection error; every answered turn must be
stored; every turn must be stored whole (4 consecutive seqs) or not at all; the process
exits 0 after closing its files.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from session_server.client import ConnectionLostError, SessionClient
from session_server.runtime.registry import ActorRegistry
from session_server.values.plans import AppendResult
from tests.support.server import ServerProcess, turn_messages

AGENT = "shutdown-agent"
CLIENTS = 4
CALLS = 60


async def test_sigterm_with_writes_in_flight(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    proc = ServerProcess(memory, "--synchronous", "FULL")
    url = await asyncio.to_thread(proc.start)
    try:
        async with SessionClient(url, AGENT) as setup:
            sid = await setup.create_session(session_id="s")
        answered: dict[int, AppendResult] = {}
        failed: dict[int, BaseException] = {}
        enough = asyncio.Event()

        async def one(client: SessionClient, n: int) -> None:
            try:
                answered[n] = await client.persist_turn(sid, turn_messages(n))
            except (ConnectionLostError, OSError) as exc:
                failed[n] = exc
            if len(answered) >= 10:
                enough.set()

        async def run_client(i: int) -> None:
            client = SessionClient(url, AGENT, reconnect_budget=0)  # no restart comes
            await client.connect()
            try:
                await asyncio.gather(*(one(client, i * 1000 + j) for j in range(CALLS)))
            finally:
                await client.close()

        clients = asyncio.gather(*(run_client(i) for i in range(CLIENTS)))
        await enough.wait()
        assert proc.proc is not None
        proc.proc.send_signal(signal.SIGTERM)
        at_signal = len(answered)
        await clients
        code = await asyncio.to_thread(proc.wait)
    finally:
        proc.kill()

    assert code == 0, proc.stderr_text
    assert "stopped" in proc.stderr_text
    assert len(answered) + len(failed) == CLIENTS * CALLS
    assert len(answered) > at_signal, "no write in flight at SIGTERM was answered"

    async with ActorRegistry(memory) as registry:
        actor = await registry.get(AGENT)
        events = await actor.load_events(sid, limit=None)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert len(events) % 4 == 0
    stored: dict[int, int] = {}
    for k in range(0, len(events), 4):
        turn = events[k : k + 4]
        n = int(turn[0].content.split()[1])
        expected = turn_messages(n)
        assert [e.content for e in turn] == [m.content for m in expected]
        assert [e.action for e in turn] == [
            "user_message",
            "tool_call_request",
            "tool_result",
            "agent_message",
        ]
        stored[n] = turn[0].seq
    for n, result in answered.items():
        assert stored[n] == result.seqs[0]
        assert result.seqs == list(range(result.seqs[0], result.seqs[0] + 4))


async def test_stop_closes_files_and_prints_address_once(tmp_path: Path) -> None:
    """The subprocess prints its address once, stops on SIGTERM and on SIGINT with exit
    code 0, and a second server reads what the first one wrote."""
    memory = tmp_path / "memory"
    for round_no in range(2):
        proc = ServerProcess(memory)
        url = await asyncio.to_thread(proc.start)
        try:
            assert url.startswith("ws://127.0.0.1:")
            async with SessionClient(url, AGENT) as client:
                if round_no == 0:
                    await client.create_session(session_id="kept")
                    await client.persist_turn("kept", turn_messages(1))
                else:
                    assert [e.seq for e in await client.load_events("kept")] == [1, 2, 3, 4]
            sig = signal.SIGTERM if round_no == 0 else signal.SIGINT
            code = await asyncio.to_thread(proc.terminate, 30.0, sig)
        finally:
            proc.kill()
        assert code == 0, proc.stderr_text
        assert sum("listening on" in line for line in proc.stdout_lines) == 1
        assert "127.0.0.1 only" in proc.stderr_text
