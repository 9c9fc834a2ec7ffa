"""Cluster mode against a real nats-server: the turn log, ownership, the fence, rebuilds.

Two ``ClusterNode``s in one process, each with its own memory dir and registry, share one
nats-server; the fault tests with node processes are in ``test_cluster_faults.py``.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from session_server import ActorRegistry, AgentActor
from session_server.runtime.cluster_node import ClusterNode
from session_server.storage.store import AgentStore
from session_server.values.context import WorkingContext
from session_server.values.errors import ConflictError, NotOwnerError
from session_server.values.events import ContextMessage, SessionEvent
from session_server.values.turn_records import APPLIED_SEQ_KEY
from tests.support.nats_cluster import NatsCluster
from tests.support.waiting import until


@asynccontextmanager
async def node(nats: NatsCluster, prefix: str, node_id: str) -> AsyncIterator[ClusterNode]:
    member = ClusterNode(nats.urls, node_id, f"ws://{node_id}.invalid", prefix=prefix, lease_s=2.0)
    await member.start()
    try:
        yield member
    finally:
        await member.stop()


def add_turn(ctx: WorkingContext, n: int) -> None:
    ctx.add_message(ContextMessage(role="user", content=f"question {n}"))
    ctx.add_message(ContextMessage(role="assistant", content=f"answer {n}"))


async def turns(actor: AgentActor, sid: str, count: int, start: int = 0) -> None:
    for n in range(start, start + count):
        ctx = await actor.build_working_context(sid)
        add_turn(ctx, n)
        await actor.persist_working_context(
            sid, ctx, idempotency_key=f"turn-{n}", usage={"input_tokens": n, "output_tokens": 1}
        )


def dump(path: Path) -> list[str]:
    """Every row of the file as SQL, the cluster's applied sequence left out."""
    conn = sqlite3.connect(path)
    try:
        return [line for line in conn.iterdump() if APPLIED_SEQ_KEY not in line]
    finally:
        conn.close()


async def test_a_rebuild_from_the_log_gives_the_same_file(
    nats_server: NatsCluster, prefix: str, tmp_path: Path
) -> None:
    async with node(nats_server, prefix, "a") as a:
        async with ActorRegistry(tmp_path / "a", idle_timeout=None, turn_logs=a) as reg:
            actor = await reg.get("agent.one")
            sid = await actor.create_session(session_id="s1", metadata={"k": "v"})
            await turns(actor, sid, 12)
            await actor.fork_session(sid, at_seq=6)  # ids made by SQLite's random()
            await actor.rewind_session(sid, to_seq=14, reason="retry")
            await actor.set_block("persona", "terse", reason="setup")
            events = await actor.load_events(sid)
            await actor.delete_events(sid, [events[0].id])
            other = await actor.create_session(session_id="gone")
            await turns(actor, other, 2)
            await actor.delete_session(other)
            path = actor.path
        expected = dump(path)
    async with node(nats_server, prefix, "b") as b:
        agent_log = await b.acquire("agent.one", tmp_path / "b" / "agent.db")
        copy = tmp_path / "b" / "agent.db"
        store = await AgentStore.open(copy, "agent.one", turn_log=agent_log)
        await store.close()
        assert b.rebuilds >= 1 and b.failovers == 1
    assert dump(copy) == expected


async def test_a_node_that_does_not_own_the_agent_names_its_owner(
    nats_server: NatsCluster, prefix: str, tmp_path: Path
) -> None:
    async with node(nats_server, prefix, "a") as a, node(nats_server, prefix, "b") as b:
        async with ActorRegistry(tmp_path / "a", idle_timeout=None, turn_logs=a) as ra:
            await (await ra.get("agent")).create_session(session_id="s")
            async with ActorRegistry(tmp_path / "b", idle_timeout=None, turn_logs=b) as rb:
                with pytest.raises(NotOwnerError) as refused:
                    await (await rb.get("agent")).list_sessions()
        assert refused.value.data["owner"] == {
            "node_id": "a",
            "url": "ws://a.invalid",
            "generation": 1,
        }
        assert await b.locate("agent") is not None
        owner = await b.owner("agent")
        assert owner is not None and owner.node_id == "a"


async def test_a_stale_owner_acknowledges_nothing_and_drops_the_agent(
    nats_server: NatsCluster, prefix: str, tmp_path: Path
) -> None:
    async with node(nats_server, prefix, "a") as a, node(nats_server, prefix, "b") as b:
        lost: list[str] = []
        a.on_lost = lost.append
        async with ActorRegistry(tmp_path / "a", idle_timeout=None, turn_logs=a) as ra:
            stale = await ra.get("agent")
            sid = await stale.create_session(session_id="s")
            await turns(stale, sid, 3)
            stale_log = await a.acquire("agent", stale.path)  # the log A appends with
            await a.leave()  # as a frozen node: its lease lapses, it still talks to NATS
            async with ActorRegistry(tmp_path / "b", idle_timeout=None, turn_logs=b) as rb:
                fresh = await rb.get("agent")
                assert len(await fresh.load_events(sid)) == 6
                await turns(fresh, sid, 1, start=3)
                ctx = await stale.build_working_context(sid)
                add_turn(ctx, 99)
                with pytest.raises(NotOwnerError):
                    await stale.persist_working_context(sid, ctx)
                # JetStream's compare-and-set refuses A's append whatever A believes:
                with pytest.raises(NotOwnerError):
                    await a.append(stale_log, b"R")
                assert a.fenced_refusals == 1
                assert lost[:1] == ["agent"] and not a.owns("agent")
                contents = [e.content for e in await fresh.load_events(sid)]
                assert "question 99" not in contents and contents[-1] == "answer 3"
                assert await b.locate("agent") is None


@pytest.fixture(params=["local", "jetstream"])
async def registry(
    request: pytest.FixtureRequest, nats_server: NatsCluster, prefix: str, tmp_path: Path
) -> AsyncIterator[ActorRegistry]:
    """The same actor tests with no turn log and with the JetStream one."""
    if request.param == "local":
        async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
            yield reg
        return
    async with (
        node(nats_server, prefix, "n1") as member,
        ActorRegistry(tmp_path, idle_timeout=None, turn_logs=member) as reg,
    ):
        yield reg


async def test_an_idempotent_retry_writes_nothing(registry: ActorRegistry) -> None:
    actor = await registry.get("agent")
    sid = await actor.create_session()
    ctx = await actor.build_working_context(sid)
    add_turn(ctx, 1)
    first = await actor.persist_working_context(sid, ctx, idempotency_key="k")
    again = await actor.persist_working_context(sid, ctx, idempotency_key="k")
    assert again.seqs == first.seqs
    assert len(await actor.load_events(sid)) == 2


async def test_a_refused_write_leaves_nothing(registry: ActorRegistry) -> None:
    actor = await registry.get("agent")
    sid = await actor.create_session(session_id="s")
    with pytest.raises(ConflictError):
        await actor.create_session(session_id="s")
    ctx = await actor.build_working_context(sid)
    add_turn(ctx, 1)
    await actor.persist_working_context(sid, ctx)
    assert [e.content for e in await actor.load_events(sid)] == ["question 1", "answer 1"]


async def test_concurrent_writers_get_contiguous_seqs(registry: ActorRegistry) -> None:
    actor = await registry.get("agent")
    sid = await actor.create_session()

    async def write(n: int) -> None:
        await actor.append_events(sid, [SessionEvent(action="user_message", content=f"m{n}")])

    await asyncio.gather(*(write(n) for n in range(30)))
    seqs = [e.seq for e in await actor.load_events(sid)]
    assert seqs == list(range(1, 31))
    await until(lambda: not actor.pending_writes, "the writes to settle")


def stored_bytes(nats: NatsCluster) -> bytes:
    """Every byte of every nats-server's store folder."""
    return b"".join(
        path.read_bytes()
        for folder in nats.store_dirs()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    )


async def test_deleted_text_and_its_key_are_gone_from_every_nats_server_file(
    nats_servers: NatsCluster, prefix: str, tmp_path: Path
) -> None:
    secret = "the launch code is 4417-crimson"
    async with node(nats_servers, prefix, "a") as a:
        async with ActorRegistry(tmp_path / "a", idle_timeout=None, turn_logs=a) as reg:
            actor = await reg.get("agent")
            sid = await actor.create_session(session_id="secret")
            ctx = await actor.build_working_context(sid)
            ctx.add_message(ContextMessage(role="user", content=secret))
            await actor.persist_working_context(sid, ctx)
            kept = await actor.create_session(session_id="kept")
            await turns(actor, kept, 2)
            old_key = a.current_key("agent")
            assert secret.encode() not in stored_bytes(nats_servers)  # sealed from the start
            await actor.delete_session(sid)
            assert a.rotations == 1 and a.current_key("agent").key_id == old_key.key_id + 1
        files = stored_bytes(nats_servers)
        assert secret.encode() not in files
        assert old_key.key not in files  # the keys live in memory storage only
    async with node(nats_servers, prefix, "b") as b:
        agent_log = await b.acquire("agent", tmp_path / "b" / "agent.db")
        assert b.current_key("agent").key_id == old_key.key_id + 1
        store = await AgentStore.open(tmp_path / "b" / "agent.db", "agent", turn_log=agent_log)
        try:
            assert [s["id"] for s in await store.list_sessions()] == ["kept"]
        finally:
            await store.close()
