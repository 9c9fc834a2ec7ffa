"""A client given several URLs, on real servers: it uses the first node that answers,
moves on when its node is SIGKILLed mid-run or says it no longer owns the agent, and no
acknowledged turn is lost or doubled (idempotency keys make the resent ones
exactly-once)."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

from websockets.asyncio.server import serve

from session_server.client import SessionClient
from session_server.client.sync_client import SyncSessionClient
from tests.support.owner_map import not_owner_node
from tests.support.server import ServerProcess, free_port, running_server
from tests.support.waiting import until

AGENT = "roaming"


def turn(i: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"question {i}"},
        {"role": "assistant", "content": f"answer {i}"},
    ]


def front_door(memory_dir: Path, owner_url: str) -> ServerProcess:
    proc = ServerProcess(memory_dir)
    proc.argv = [
        sys.executable, "-m", "tests.support.front_door_child",
        str(memory_dir), owner_url, AGENT,
    ]  # fmt: skip
    return proc


async def test_a_sigkilled_front_door_loses_no_acknowledged_turn(tmp_path: Path) -> None:
    async with running_server(tmp_path / "owner") as owner:
        door = front_door(tmp_path / "door", owner.url)
        await asyncio.to_thread(door.start)
        try:
            async with SessionClient([door.url, owner.url], AGENT, reconnect_budget=20) as client:
                sid = await client.create_session()
                acknowledged: list[int] = []

                async def persist_all() -> None:
                    for i in range(40):
                        await client.persist_turn(sid, turn(i), idempotency_key=f"turn-{i}")
                        acknowledged.append(i)

                writer = asyncio.create_task(persist_all())
                await until(lambda: len(acknowledged) >= 10, "ten turns through the door")
                door.proc.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
                await writer
                assert client.url.startswith(owner.url)
                events = await client.load_events(sid, limit=1000)
        finally:
            door.kill()
    assert acknowledged == list(range(40))
    contents = [e.content for e in events]
    expected = [text for i in range(40) for text in (f"question {i}", f"answer {i}")]
    assert contents == expected  # every acknowledged turn once, in order
    assert [e.seq for e in events] == list(range(1, 81))


async def test_the_first_node_that_answers_is_used(tmp_path: Path) -> None:
    dead = f"ws://127.0.0.1:{free_port()}"
    async with running_server(tmp_path) as live:
        async with SessionClient([dead, live.url], AGENT, reconnect_budget=5) as client:
            sid = await client.create_session()
            assert client.url.startswith(live.url)
        sync = SyncSessionClient([dead, live.url], AGENT, reconnect_budget=5)
        try:
            listed = await asyncio.to_thread(sync.list_sessions)  # the server runs here
            assert [s["id"] for s in listed] == [sid]
            assert sync.url.startswith(live.url)
        finally:
            await asyncio.to_thread(sync.close)


async def test_a_not_owner_refusal_moves_the_client_to_the_next_node(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path) as live,
        serve(not_owner_node(AGENT), "127.0.0.1", 0) as stale,
    ):
        stale_url = f"ws://127.0.0.1:{stale.sockets[0].getsockname()[1]}"
        async with SessionClient([stale_url, live.url], AGENT, reconnect_budget=5) as client:
            assert client.url.startswith(stale_url)  # it answered the handshake
            sid = await client.create_session()
            sub = await client.subscribe(sid)
            await client.persist_turn(sid, turn(0), idempotency_key="t0")
            assert client.url.startswith(live.url)
            seqs: list[int] = []
            async for event in sub:
                seqs.append(event.seq)
                if event.seq == 2:
                    break
            assert seqs == [1, 2]
