"""Cluster faults with real processes: 3 nats-servers, 3 ``serve --cluster`` nodes.

Each test writes turns through the agent's owner (``cluster.owner``; forwarding is the
front door's) with idempotency keys, injects one fault, and checks that every
acknowledged turn is stored once, in order, and that nothing else is.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest

from session_server.client import SessionClient
from session_server.values.errors import SessionServerError, UnavailableError
from tests.support.cluster_nodes import ClusterNodes, TurnWriter
from tests.support.nats_cluster import NatsCluster


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[ClusterNodes]:
    servers = await NatsCluster.start(tmp_path / "nats", 3)
    nodes = ClusterNodes(servers, tmp_path / "nodes")
    try:
        await nodes.start()
        yield nodes
    finally:
        nodes.stop()
        servers.stop()


async def test_sigkill_of_the_owner_node_loses_no_acknowledged_turn(
    cluster: ClusterNodes,
) -> None:
    writer = TurnWriter(cluster, "agent-kill")
    await writer.turns(0, 15)
    owner = await cluster.owner("agent-kill")
    cluster.kill(owner)
    await writer.turns(15, 15)
    assert writer.acked == list(range(30))
    assert writer.gaps and max(writer.gaps) < 5.0, writer.gaps
    new_owner = await cluster.owner("agent-kill")
    assert new_owner != owner
    assert await writer.stored() == writer.expected()
    status = await cluster.health(new_owner)
    assert status["node_id"] == new_owner and status["owned_agents"] >= 1
    assert {n["node_id"] for n in status["nodes"]} == set(cluster.alive())
    await writer.close()
    for node_id in cluster.alive():  # every node serves it (the others forward)
        assert await writer.stored_through(node_id) == writer.expected(), node_id
        async with SessionClient(cluster.url(node_id), None) as client:
            assert "agent-kill" in await client.list_agents(), node_id  # the whole cluster's


async def test_a_frozen_owner_that_wakes_acknowledges_nothing(cluster: ClusterNodes) -> None:
    writer = TurnWriter(cluster, "agent-freeze")
    await writer.turns(0, 10)
    owner = await cluster.owner("agent-freeze")
    stale = SessionClient(cluster.url(owner), "agent-freeze", reconnect_budget=0.5)
    await stale.connect()
    cluster.freeze(owner)
    # Sent to the frozen owner: it is read only when the process runs again.
    late = asyncio.ensure_future(
        stale.persist_turn(
            "s", [{"role": "user", "content": "stale question"}], idempotency_key="stale"
        )
    )
    await writer.turns(10, 10)  # another node claims once the lease lapsed
    assert await cluster.owner("agent-freeze") != owner
    cluster.thaw(owner)
    # The woken node does not acknowledge it: it answers not_owner. The client then
    # moves on and resends the keyed write, which the node, now a front door, forwards
    # to the new owner; either way the write is stored at most once, after the turns
    # acknowledged before it, and the session never forks.
    try:
        await asyncio.wait_for(late, 30.0)
    except UnavailableError as refused:  # -32005: the client's class for it
        assert refused.data is not None and refused.data["reason"] == "not_owner"
        late_stored = False
    else:
        late_stored = True
    await stale.close()
    async with SessionClient(cluster.url(owner), None) as client:
        health = await client.cluster_status()
    assert health["node_id"] == owner
    stored = await writer.stored()
    assert stored.count("stale question") == (1 if late_stored else 0)
    assert [text for text in stored if text != "stale question"] == writer.expected()
    await writer.close()


async def stream_leader(nats_cluster: NatsCluster) -> str:
    nc = await nats.connect(nats_cluster.urls)
    try:
        info = await nc.jetstream().stream_info("SS_TURNS")
        assert info.cluster is not None and info.cluster.leader is not None
        return str(info.cluster.leader)
    finally:
        await nc.close()


async def test_sigkill_of_the_stream_leader_loses_no_acknowledged_turn(
    cluster: ClusterNodes,
) -> None:
    writer = TurnWriter(cluster, "agent-leader")
    await writer.turns(0, 10)
    leader = await stream_leader(cluster.nats)
    cluster.nats.kill(leader)
    await writer.turns(10, 10)
    assert writer.acked == list(range(20))
    assert await writer.stored() == writer.expected()
    await writer.close()
    for node_id in cluster.alive():
        assert await writer.stored_through(node_id) == writer.expected(), node_id


@pytest.mark.xfail(
    strict=False,
    reason="issue 38, open: a node whose NATS connection is to the frozen leader can wait "
    "past 90 s (nats-py notices a frozen server only by its ping interval); the stalled "
    "writes answer cluster_unavailable and nothing acknowledged is lost, but failover "
    "is not bounded yet",
)
async def test_a_frozen_stream_leader_loses_no_acknowledged_turn(cluster: ClusterNodes) -> None:
    writer = TurnWriter(cluster, "agent-frozen-leader")
    await writer.turns(0, 10)
    leader = await stream_leader(cluster.nats)
    cluster.nats.freeze(leader)  # the others elect a new leader; writes wait meanwhile
    await writer.turns(10, 5)
    cluster.nats.thaw(leader)
    await writer.turns(15, 5)
    assert writer.acked == list(range(20))
    assert await writer.stored() == writer.expected()
    await writer.close()


async def test_a_client_of_every_node_loses_no_turn_when_the_owner_is_killed(
    cluster: ClusterNodes,
) -> None:
    """Through the front doors only: the client knows every node's URL, not the owner;
    the owner is SIGKILLed mid-run; each acknowledged turn is stored once, in order."""
    urls = [cluster.url(n) for n in cluster.alive()]
    acked: list[int] = []
    async with SessionClient(urls, "agent-door", reconnect_budget=20.0) as client:
        await client.create_session(session_id="s", if_exists="return")

        async def turn(n: int) -> None:
            errors: list[str] = []
            deadline = time.monotonic() + 40.0
            while time.monotonic() < deadline:
                try:
                    await asyncio.wait_for(
                        client.persist_turn(
                            "s",
                            [
                                {"role": "user", "content": f"question {n}"},
                                {"role": "assistant", "content": f"answer {n}"},
                            ],
                            idempotency_key=f"door-{n}",
                        ),
                        10.0,
                    )
                except (SessionServerError, OSError, TimeoutError) as exc:
                    errors.append(repr(exc))
                    await asyncio.sleep(0.2)  # a retry's pause, as a caller's backoff
                    continue
                acked.append(n)
                return
            raise AssertionError(f"turn {n} never acknowledged: {errors[-5:]}")

        for n in range(10):
            await turn(n)
        owner = await cluster.owner("agent-door")
        cluster.kill(owner)
        for n in range(10, 20):
            await turn(n)
        events = await client.load_events("s", limit=None)
    assert acked == list(range(20))
    assert [e.content for e in events] == [
        text for n in acked for text in (f"question {n}", f"answer {n}")
    ]
