"""The front door (cluster mode) on real servers: two or three ``SessionServer``s on
127.0.0.1 with their own memory dirs and a small ``OwnerDirectory`` (``OwnerMap``). A
client of any node reaches the agent's owner: same answers, same errors, same
notifications; the owner's bounds and token checks hold; a gone owner is forgotten and
the client's reconnection reaches the next one."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed, InvalidStatus

from session_server.client import SessionClient
from session_server.client.live import StreamChunk, StreamClosed
from session_server.rpc.method_spec import CallContext, MethodSpec, RpcParams
from session_server.rpc.table import BUILTIN_METHODS
from session_server.values.errors import NotFoundError, NotOwnerError
from session_server.values.events import SessionEvent
from session_server.values.forwarding import FORWARD_HEADER, forward_credential
from session_server.values.ownership import OwnerLocation
from tests.support.owner_map import SECRET, OwnerMap, at, not_owner_node
from tests.support.restartable_process import RestartableProcess
from tests.support.server import RestartableServer, RunningServer, running_server
from tests.support.waiting import until

AGENT = "far-agent"


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def turn(i: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"question {i}"},
        {"role": "assistant", "content": f"answer {i}"},
    ]


@contextlib.asynccontextmanager
async def two_nodes(
    tmp_path: Path, **options: Any
) -> AsyncIterator[tuple[RunningServer, RunningServer, OwnerMap]]:
    """Node ``b`` owns ``AGENT``; node ``a`` is a front door for it."""
    directory = OwnerMap()
    async with (
        running_server(
            tmp_path / "b", owner_directory=OwnerMap(), cluster_secret=SECRET, **options
        ) as b,
        running_server(
            tmp_path / "a", owner_directory=directory, cluster_secret=SECRET, **options
        ) as a,
    ):
        directory.owners[AGENT] = at("b", b.url)
        yield a, b, directory


async def rpc(ws: ClientConnection, frame: Any) -> Any:
    await ws.send(msgspec.json.encode(frame), text=True)
    return msgspec.json.decode(await ws.recv())


def agent_ws(url: str, agent: str = AGENT) -> str:
    return f"{url}/v1/agents/{agent}"


async def test_calls_through_a_front_door_are_served_by_the_owner(tmp_path: Path) -> None:
    async with two_nodes(tmp_path) as (a, b, _directory):
        async with SessionClient(a.url, AGENT) as via_a, SessionClient(b.url, AGENT) as at_b:
            sid = await via_a.create_session({"k": "v"})
            for i in range(3):
                await via_a.persist_turn(sid, turn(i), idempotency_key=f"t{i}")
            assert await via_a.load_events(sid) == await at_b.load_events(sid)
            assert (await via_a.get_session(sid)) == (await at_b.get_session(sid))
            with pytest.raises(NotFoundError) as far:
                await via_a.load_events("no-such-session")
            with pytest.raises(NotFoundError) as near:
                await at_b.load_events("no-such-session")
            assert (str(far.value), far.value.data) == (str(near.value), near.value.data)
        # The agent lives at its owner only.
        assert (tmp_path / "b" / "agents" / AGENT).is_dir()
        assert not (tmp_path / "a" / "agents" / AGENT).exists()
        ops = a.registry.operations
        assert ops.value("forwarded_connections_total") == 1
        assert ops.value("forwarded_calls_total") >= 6


async def test_batches_and_raw_answers_are_the_owners_byte_for_byte(tmp_path: Path) -> None:
    async with (
        two_nodes(tmp_path) as (a, b, _directory),
        connect(agent_ws(a.url)) as via_a,
        connect(agent_ws(b.url)) as at_b,
    ):
        created = await rpc(
                via_a,
                {"jsonrpc": "2.0", "id": "c", "method": "session.create",
                 "params": {"session_id": "s1"}},
            )  # fmt: skip
        assert created["result"]["session_id"] == "s1"
        batch = [
                {"jsonrpc": "2.0", "id": 7, "method": "session.get", "params": {"session_id": "s1"}},
                {"jsonrpc": "2.0", "method": "session.get", "params": {"session_id": "s1"}},
                {"jsonrpc": "2.0", "id": [1], "method": "session.get", "params": {}},
                {"jsonrpc": "2.0", "id": "x", "method": "no.such", "params": {}},
                {"jsonrpc": "2.0", "id": 9, "method": "events.load",
                 "params": {"session_id": "nope"}},
            ]  # fmt: skip
        await via_a.send(msgspec.json.encode(batch), text=True)
        await at_b.send(msgspec.json.encode(batch), text=True)
        assert await via_a.recv() == await at_b.recv()
        await via_a.send(b"{not json", text=True)
        await at_b.send(b"{not json", text=True)
        assert await via_a.recv() == await at_b.recv()


async def test_subscriptions_and_live_turns_are_forwarded(tmp_path: Path) -> None:
    async with (
        two_nodes(tmp_path) as (a, b, _directory),
        SessionClient(a.url, AGENT) as via_a,
        SessionClient(b.url, AGENT) as at_b,
    ):
        sid = await at_b.create_session()
        await at_b.persist_turn(sid, turn(0), idempotency_key="t0")
        sub = await via_a.subscribe_live(sid, after_seq=0)
        writer = await at_b.stream(sid)
        await writer.write(text("Hel"), text("lo"))
        await writer.flush()
        await writer.close([{"role": "assistant", "content": "Hello"}])
        items: list[Any] = []
        async for item in sub:
            items.append(item)
            if isinstance(item, StreamClosed):
                break
        events = [i for i in items if isinstance(i, SessionEvent)]
        assert [e.seq for e in events] == [1, 2, 3]
        chunks = [c["text"] for i in items if isinstance(i, StreamChunk) for c in i.chunks]
        assert chunks == ["Hel", "lo"]
        assert items[-1] == StreamClosed(sid, writer.stream_id, True)
        await sub.close()


async def test_the_owner_checks_the_clients_token_and_its_bounds(tmp_path: Path) -> None:
    tokens = ["alltok:*:admin", f"onetok:{AGENT}:read", "othertok:other:admin"]
    async with two_nodes(tmp_path, tokens=tokens, max_subscriptions=1) as (a, _b, _d):
        # Refused at the front door: no token, a token for another agent.
        with pytest.raises(InvalidStatus) as missing:
            await connect(agent_ws(a.url))
        assert missing.value.response.status_code == 401
        with pytest.raises(InvalidStatus) as other:
            await connect(agent_ws(a.url), additional_headers={"Authorization": "Bearer othertok"})
        assert other.value.response.status_code == 403
        async with SessionClient(a.url, AGENT, token="alltok") as admin:
            sid = await admin.create_session()
            second = await admin.create_session()
            # The owner's bound on subscriptions per connection holds for the forwarded one.
            await admin.subscribe(sid)
            with pytest.raises(Exception, match="subscriptions"):
                await admin.subscribe(second)
        async with SessionClient(a.url, AGENT, token="onetok") as reader:
            assert len(await reader.list_sessions()) == 2
            with pytest.raises(Exception, match="scope"):
                await reader.create_session()


async def test_a_forwarded_handshake_is_served_or_refused_never_forwarded_again(
    tmp_path: Path,
) -> None:
    async with two_nodes(tmp_path) as (a, b, directory):
        credential = forward_credential(SECRET, AGENT)
        # Node a believes b owns the agent; a handshake forwarded to a is refused (421),
        # not passed back to b.
        with pytest.raises(InvalidStatus) as misdirected:
            await connect(agent_ws(a.url), additional_headers={FORWARD_HEADER: credential})
        assert misdirected.value.response.status_code == 421
        with pytest.raises(InvalidStatus) as forged:
            await connect(agent_ws(b.url), additional_headers={FORWARD_HEADER: "f" * 64})
        assert forged.value.response.status_code == 401
        async with connect(agent_ws(b.url), additional_headers={FORWARD_HEADER: credential}) as ws:
            answer = await rpc(
                ws, {"jsonrpc": "2.0", "id": 1, "method": "session.create",
                     "params": {"session_id": "s"}},
            )  # fmt: skip
            assert answer["result"]["session_id"] == "s"
        assert directory.forgotten == []


async def test_an_unreachable_owner_is_forgotten_and_the_agent_found_again(
    tmp_path: Path,
) -> None:
    async with two_nodes(tmp_path) as (a, b, directory):
        dead = RestartableServer(tmp_path / "dead")  # a port nobody listens on
        directory.owners[AGENT] = at("dead", dead.url)
        directory.on_forget = lambda d, agent: d.owners.__setitem__(agent, at("b", b.url, 2))
        async with SessionClient(a.url, AGENT) as client:
            sid = await client.create_session()
        assert directory.forgotten == [AGENT]
        async with SessionClient(b.url, AGENT) as at_b:
            assert await at_b.load_events(sid) == []
        ops = a.registry.operations
        assert ops.value("forward_failures_total", {"reason": "unreachable"}) == 1
        assert ops.value("forward_relocations_total") == 1
        # No owner reachable at all: 503 with Retry-After, the client may try again.
        directory.on_forget = None
        directory.owners[AGENT] = at("dead", dead.url)
        with pytest.raises(InvalidStatus) as unavailable:
            await connect(agent_ws(a.url))
        assert unavailable.value.response.status_code == 503
        assert unavailable.value.response.headers["Retry-After"] == "1"


async def test_a_client_leaving_closes_its_upstream(tmp_path: Path) -> None:
    async with two_nodes(tmp_path) as (a, b, _directory):
        ops_b = b.registry.operations
        async with connect(agent_ws(a.url)) as ws:
            await rpc(ws, {"jsonrpc": "2.0", "id": 1, "method": "session.list"})
            assert ops_b.value("open_connections") == 1
        await until(lambda: ops_b.value("open_connections") == 0, "the upstream closed")
        await until(lambda: a.registry.operations.value("open_connections") == 0, "a's count")


async def test_an_owner_going_away_ends_the_connection_and_the_client_resumes(
    tmp_path: Path,
) -> None:
    owner = RestartableServer(tmp_path / "owner")
    await owner.start()
    directory = OwnerMap({AGENT: at("owner", owner.url)})
    try:
        async with running_server(
            tmp_path / "a", owner_directory=directory, cluster_secret=SECRET
        ) as a:
            async with SessionClient(a.url, AGENT, reconnect_budget=20) as client:
                sid = await client.create_session()
                sub = await client.subscribe(sid)
                await client.persist_turn(sid, turn(0), idempotency_key="t0")
                await owner.stop()  # the owner goes away: a closes the client (1013)
                await until(lambda: AGENT in directory.forgotten, "the owner forgotten")
                await owner.start()
                # The client reconnects through a, resends its keyed write, resumes.
                await client.persist_turn(sid, turn(1), idempotency_key="t1")
                seen: list[int] = []
                async for event in sub:
                    seen.append(event.seq)
                    if event.seq == 4:
                        break
                assert seen == [1, 2, 3, 4]
                await sub.close()
            ops = a.registry.operations
            assert ops.value("forward_failures_total", {"reason": "dropped"}) == 1
    finally:
        await owner.stop()


async def test_a_not_owner_answer_makes_the_front_door_forget_the_owner(tmp_path: Path) -> None:
    async with (
        two_nodes(tmp_path) as (a, _b, directory),
        serve(not_owner_node(AGENT), "127.0.0.1", 0) as stale,
    ):
        port = stale.sockets[0].getsockname()[1]
        directory.owners[AGENT] = at("stale", f"ws://127.0.0.1:{port}")
        async with connect(agent_ws(a.url)) as ws:
            answer = await rpc(ws, {"jsonrpc": "2.0", "id": 2, "method": "session.list"})
            assert answer["error"]["code"] == -32005
            assert answer["error"]["data"]["reason"] == "not_owner"
            with pytest.raises(ConnectionClosed):
                await ws.recv()
            assert ws.close_code == 1013
        assert directory.forgotten == [AGENT]
        ops = a.registry.operations
        assert ops.value("forward_relocations_total") == 1
        assert ops.value("forward_failures_total", {"reason": "dropped"}) == 0


async def test_a_server_without_a_directory_never_looks_one_up(tmp_path: Path) -> None:
    async with running_server(tmp_path) as single:
        assert single.server.forwarder is None
        async with SessionClient(single.url, AGENT) as client:
            await client.create_session()
    with pytest.raises(ValueError, match="cluster_secret"):
        async with running_server(tmp_path / "x", owner_directory=OwnerMap()):
            pass


async def test_stopping_a_front_door_closes_forwarded_connections(tmp_path: Path) -> None:
    async with two_nodes(tmp_path) as (a, b, _directory):
        async with connect(agent_ws(a.url)) as ws:
            await rpc(ws, {"jsonrpc": "2.0", "id": 1, "method": "session.list"})
            await asyncio.wait_for(a.server.stop(), 15)
            with pytest.raises(ConnectionClosed):
                await ws.recv()
            assert ws.close_code == 1001
        await until(lambda: b.registry.operations.value("open_connections") == 0, "upstream")


async def test_a_sigkilled_owner_loses_no_acknowledged_turn_through_the_front_door(
    tmp_path: Path,
) -> None:
    """The owner (a ``serve`` subprocess) is SIGKILLed mid-run and comes back on the same
    files (as a new owner would, from the same data): the front door forgets it, the
    client reconnects through the front door, resends its keyed writes and resumes its
    subscription; every acknowledged turn is stored once, in order, and seen once."""
    owner = RestartableProcess(tmp_path / "owner")
    await owner.start()
    directory = OwnerMap({AGENT: at("owner", owner.url)})
    try:
        async with (
            running_server(tmp_path / "a", owner_directory=directory, cluster_secret=SECRET) as a,
            SessionClient(a.url, AGENT, reconnect_budget=30) as client,
        ):
            sid = await client.create_session()
            sub = await client.subscribe(sid)
            acknowledged: list[int] = []

            async def persist_all() -> None:
                for i in range(30):
                    await client.persist_turn(sid, turn(i), idempotency_key=f"turn-{i}")
                    acknowledged.append(i)

            writer = asyncio.create_task(persist_all())
            await until(lambda: len(acknowledged) >= 8, "eight turns through the front door")
            await owner.stop(signal.SIGKILL)
            await until(lambda: AGENT in directory.forgotten, "the owner forgotten")
            await owner.start()
            await writer
            seen: list[int] = []
            async for event in sub:
                seen.append(event.seq)
                if event.seq == 60:
                    break
            events = await client.load_events(sid, limit=1000)
            await sub.close()
    finally:
        await owner.stop()
    assert acknowledged == list(range(30))
    assert seen == list(range(1, 61))
    expected = [text for i in range(30) for text in (f"question {i}", f"answer {i}")]
    assert [e.content for e in events] == expected


class _Empty(RpcParams):
    pass


async def _fenced(ctx: CallContext, params: _Empty) -> Any:
    """What the cluster's fence answers on a node that lost the agent."""
    raise NotOwnerError(
        "this node no longer owns the agent",
        data={"reason": "not_owner", "retryable": True, "agent_id": ctx.agent_id},
    )


FENCED_TABLE = {
    **BUILTIN_METHODS,
    "test.fenced": MethodSpec("test.fenced", _Empty, _fenced, scope="read"),
}


async def test_a_not_owner_answer_ends_a_local_connection_with_1013(tmp_path: Path) -> None:
    """In cluster mode a connection served here ends once an answer says this node no
    longer owns the agent, so the client's next handshake reaches the owner (forwarded);
    the other calls in flight are answered first. A single node never does this."""
    async with (
        running_server(
            tmp_path / "n",
            owner_directory=OwnerMap(),
            cluster_secret=SECRET,
            methods=FENCED_TABLE,
        ) as node,
        connect(agent_ws(node.url)) as ws,
    ):
        created = await rpc(
            ws,
            {"jsonrpc": "2.0", "id": 1, "method": "session.create", "params": {"session_id": "s"}},
        )
        assert created["result"]["session_id"] == "s"
        refused = await rpc(ws, {"jsonrpc": "2.0", "id": 2, "method": "test.fenced"})
        assert refused["error"]["data"]["reason"] == "not_owner"
        with pytest.raises(ConnectionClosed):
            await ws.recv()
        assert ws.close_code == 1013
    async with (
        running_server(tmp_path / "single", methods=FENCED_TABLE) as single,
        connect(agent_ws(single.url)) as ws,
    ):
        for rid in (1, 2):
            refused = await rpc(ws, {"jsonrpc": "2.0", "id": rid, "method": "test.fenced"})
            assert refused["error"]["code"] == -32005


class _BrokenDirectory(OwnerMap):
    """A directory whose store is down (the cluster's KV unreachable)."""

    async def locate(self, agent_id: str) -> OwnerLocation | None:
        raise ConnectionError("the ownership store cannot be reached")


async def test_a_failing_directory_answers_503_and_the_client_retries(tmp_path: Path) -> None:
    directory = _BrokenDirectory()
    async with running_server(tmp_path, owner_directory=directory, cluster_secret=SECRET) as a:
        with pytest.raises(InvalidStatus) as refused:
            await connect(agent_ws(a.url))
        assert refused.value.response.status_code == 503
        assert refused.value.response.headers["Retry-After"] == "1"
        with pytest.raises(InvalidStatus) as forwarded:
            await connect(
                agent_ws(a.url),
                additional_headers={FORWARD_HEADER: forward_credential(SECRET, AGENT)},
            )
        assert forwarded.value.response.status_code == 503
        # The server endpoint needs no owner: it answers.
        async with connect(f"{a.url}/v1") as ws:
            listed = await rpc(ws, {"jsonrpc": "2.0", "id": 1, "method": "agents.list"})
            assert "result" in listed


async def test_a_frozen_owner_is_found_gone_by_the_upstreams_keepalive(tmp_path: Path) -> None:
    """An owner that stops answering (SIGSTOP: no reset, no close) is found gone by the
    upstream's keepalive, forgotten, and the client closed with 1013."""
    owner = RestartableProcess(tmp_path / "owner")
    await owner.start()
    directory = OwnerMap({AGENT: at("owner", owner.url)})
    try:
        async with (
            running_server(tmp_path / "a", owner_directory=directory, cluster_secret=SECRET) as a,
            connect(agent_ws(a.url), ping_interval=None) as ws,
        ):
            created = await rpc(
                ws,
                {"jsonrpc": "2.0", "id": 1, "method": "session.create",
                 "params": {"session_id": "s"}},
            )  # fmt: skip
            assert created["result"]["session_id"] == "s"
            owner.send_signal(signal.SIGSTOP)
            try:
                with pytest.raises(ConnectionClosed):
                    await ws.recv()
                assert ws.close_code == 1013
                assert directory.forgotten == [AGENT]
                ops = a.registry.operations
                assert ops.value("forward_failures_total", {"reason": "dropped"}) == 1
            finally:
                owner.send_signal(signal.SIGCONT)
    finally:
        await owner.stop()
