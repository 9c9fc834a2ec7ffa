"""Pipelining, batches, concurrent writers on one session and gap-free subscriptions."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from session_server.client import SessionClient
from session_server.rpc.method_spec import CallContext, MethodSpec, method_table
from session_server.rpc.params import NoParams
from session_server.rpc.table import ROWS
from session_server.values.events import SessionEvent
from tests.support.server import RunningServer, running_server

AGENT = "busy-agent"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "memory", synchronous="NORMAL") as running:
        yield running


@pytest.fixture
async def gated(tmp_path: Path) -> AsyncIterator[RunningServer]:
    """A server whose table adds ``test.wait``, which blocks until ``test.release`` runs:
    only pipelining can answer both."""
    gate = asyncio.Event()

    async def wait(ctx: CallContext, p: NoParams) -> str:
        await gate.wait()
        return "released"

    async def release(ctx: CallContext, p: NoParams) -> str:
        gate.set()
        return "done"

    methods = method_table(
        ROWS,
        [
            MethodSpec("test.wait", NoParams, wait, scope="read"),
            MethodSpec("test.release", NoParams, release, scope="read"),
        ],
    )
    async with running_server(tmp_path / "memory", methods=methods) as running:
        yield running


async def recv_json(ws: ClientConnection) -> Any:
    return json.loads(await ws.recv())


async def test_requests_are_pipelined(gated: RunningServer) -> None:
    async with connect(f"{gated.url}/v1/agents/{AGENT}") as ws:
        await ws.send('{"jsonrpc":"2.0","id":"w","method":"test.wait"}')
        await ws.send('{"jsonrpc":"2.0","id":"r","method":"test.release"}')
        first, second = await recv_json(ws), await recv_json(ws)
        assert first == {"jsonrpc": "2.0", "id": "r", "result": "done"}
        assert second == {"jsonrpc": "2.0", "id": "w", "result": "released"}


async def test_many_pipelined_requests_get_their_own_answers(server: RunningServer) -> None:
    async with connect(f"{server.url}/v1/agents/{AGENT}") as ws:
        for i in range(50):
            await ws.send(
                json.dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": i,
                        "method": "session.create",
                        "params": {"session_id": f"s{i}"},
                    }
                )
            )
        answers = [await recv_json(ws) for _ in range(50)]
        assert sorted(a["id"] for a in answers) == list(range(50))
        assert all(a["result"]["session_id"] == f"s{a['id']}" for a in answers)


async def test_batch_answers_requests_but_not_notifications(server: RunningServer) -> None:
    async with connect(f"{server.url}/v1/agents/{AGENT}") as ws:
        batch = [
            {"jsonrpc": "2.0", "id": 1, "method": "session.create", "params": {"session_id": "b"}},
            {"jsonrpc": "2.0", "method": "session.list"},
            {"jsonrpc": "2.0", "id": 2, "method": "no.such"},
            "junk",
            {"jsonrpc": "2.0", "id": 3, "method": "session.get", "params": {"session_id": "zz"}},
        ]
        await ws.send(json.dumps(batch))
        answers = await recv_json(ws)
        assert isinstance(answers, list)
        by_id = {a["id"]: a for a in answers}
        assert len(answers) == 4
        assert by_id[1]["result"]["session_id"] == "b"
        assert by_id[2]["error"]["code"] == -32601
        assert by_id[None]["error"]["code"] == -32600
        assert by_id[3]["error"]["code"] == -32001

        await ws.send(json.dumps([{"jsonrpc": "2.0", "method": "session.list"}]))
        await ws.send('{"jsonrpc":"2.0","id":"next","method":"session.list"}')
        assert (await recv_json(ws))["id"] == "next"  # the all-notification batch got nothing


async def collect(sub: Any, count: int) -> list[SessionEvent]:
    events: list[SessionEvent] = []
    async for event in sub:
        events.append(event)
        if len(events) == count:
            break
    return events


async def test_two_writers_one_session_contiguous_seqs_and_all_notifications(
    server: RunningServer,
) -> None:
    per_writer, per_call = 40, 3
    total = 2 * per_writer * per_call
    async with (
        SessionClient(server.url, AGENT) as a,
        SessionClient(server.url, AGENT) as b,
    ):
        sid = await a.create_session()
        sub_a, sub_b = await a.subscribe(sid), await b.subscribe(sid)
        assert sub_a.last_seq == sub_b.last_seq == 0
        watchers = [
            asyncio.create_task(collect(sub_a, total)),
            asyncio.create_task(collect(sub_b, total)),
        ]

        async def write(client: SessionClient, tag: str) -> list[list[int]]:
            calls = [
                client.append_events(
                    sid,
                    [SessionEvent(content=f"{tag}-{i}-{j}") for j in range(per_call)],
                )
                for i in range(per_writer)
            ]
            return [r.seqs for r in await asyncio.gather(*calls)]

        seqs_a, seqs_b = await asyncio.gather(write(a, "a"), write(b, "b"))
        all_seqs = sorted(s for call in seqs_a + seqs_b for s in call)
        assert all_seqs == list(range(1, total + 1))
        for call in seqs_a + seqs_b:  # each call's events are contiguous (atomic append)
            assert call == list(range(call[0], call[0] + per_call))

        seen_a, seen_b = await asyncio.gather(*watchers)
        assert [e.seq for e in seen_a] == list(range(1, total + 1))
        assert [e.seq for e in seen_b] == list(range(1, total + 1))
        stored = await a.load_events(sid, limit=None)
        assert [e.content for e in stored] == [e.content for e in seen_a]


async def test_subscribing_during_writes_misses_nothing(server: RunningServer) -> None:
    async with (
        SessionClient(server.url, AGENT) as writer,
        SessionClient(server.url, AGENT) as reader,
    ):
        sid = await writer.create_session()
        stop = asyncio.Event()
        written: list[int] = []

        async def keep_writing() -> None:
            while not stop.is_set():
                result = await writer.append_events(sid, [SessionEvent(content="x")])
                written.extend(result.seqs)

        task = asyncio.create_task(keep_writing())
        while len(written) < 5:  # writes are under way
            await writer.get_session(sid)
        sub = await reader.subscribe(sid)
        start = sub.last_seq
        first = await sub.__anext__()
        assert first.seq == start + 1
        while len(written) < start + 20:
            await writer.get_session(sid)
        stop.set()
        await task
        rest = await collect(sub, written[-1] - first.seq)
        assert [first.seq, *(e.seq for e in rest)] == list(range(start + 1, written[-1] + 1))


async def test_disconnect_unsubscribes(server: RunningServer) -> None:
    async with SessionClient(server.url, AGENT) as writer:
        sid = await writer.create_session()
        async with SessionClient(server.url, AGENT) as reader:
            await reader.subscribe(sid)
        actor = await server.registry.get(AGENT)
        # The server dropped the actor subscription when the connection went away.
        while actor._subscribers.get(sid):
            await writer.get_session(sid)
        await writer.append_events(sid, [SessionEvent(content="nobody listens")])
        assert not actor._subscribers.get(sid)
