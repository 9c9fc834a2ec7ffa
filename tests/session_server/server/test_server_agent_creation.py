"""Agents are created only by writes (issue 13, item 7), and agent ids are NFC (item 8).

Against a real server on 127.0.0.1: every read of an agent that has no store answers
-32001 (``data.field == "agent_id"``) and makes no folder, file or actor; the methods that
create agents (``MethodSpec.creates_agent``) do, within ``max_agents``; an evicted actor
leaves memory with its store. The subprocess test asks ``session.list`` of 1,000 unknown
agents and checks the folders, the ``session_server_actors`` gauge and the RSS.
"""

from __future__ import annotations

import asyncio
import gc
import json
import unicodedata
import weakref
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from websockets.asyncio.client import ClientConnection, connect

from session_server import adapters
from session_server.client import SessionClient
from session_server.runtime.registry import ActorRegistry
from session_server.values.errors import NotFoundError, TooLargeError
from tests.support.load import rss_kib
from tests.support.plain_http import http_get
from tests.support.server import RunningServer, ServerProcess, running_server

# Every read (and every write that needs an existing session) of an unknown agent.
READS: list[tuple[str, dict[str, Any]]] = [
    ("session.list", {}),
    ("session.get", {"session_id": "s"}),
    ("events.load", {"session_id": "s"}),
    ("context.build", {"session_id": "s"}),
    ("context.render", {"session_id": "s", "adapter": adapters.names()[0]}),
    ("memory.view", {}),
    ("memory.get_strategy", {}),
    ("export.session", {"session_id": "s"}),
    ("events.subscribe", {"session_id": "s"}),
    ("agent.backup", {}),
    ("events.append", {"session_id": "s", "events": [{"content": "x"}]}),
    ("turn.persist", {"session_id": "s", "messages": [{"role": "user", "content": "x"}]}),
    ("events.delete", {"session_id": "s", "event_ids": ["e"]}),
    ("session.update", {"session_id": "s", "metadata": {}}),
    ("session.delete", {"session_id": "s"}),
    ("memory.compact", {"session_id": "s"}),
]


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "memory") as running:
        yield running


async def ask(ws: ClientConnection, method: str, params: dict[str, Any]) -> dict[str, Any]:
    await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
    answer: dict[str, Any] = json.loads(await ws.recv())
    return answer


def agent_url(url: str, agent: str) -> str:
    return f"{url}/v1/agents/{quote(agent, safe='')}"


async def test_reads_of_an_unknown_agent_are_not_found_and_create_nothing(
    server: RunningServer,
) -> None:
    async with connect(agent_url(server.url, "ghost")) as ws:
        for method, params in READS:
            answer = await ask(ws, method, params)
            assert answer["error"]["code"] == -32001, (method, answer)
            assert answer["error"]["data"] == {"field": "agent_id", "agent_id": "ghost"}
            assert "agent 'ghost' not found" in answer["error"]["message"]
        assert not (server.registry.memory_dir / "agents").exists()
        assert server.registry.actor_count == 0
        # A write that creates agents does; then the same reads answer as usual.
        assert (await ask(ws, "session.create", {"session_id": "s"}))["result"]
        assert (server.registry.memory_dir / "agents" / "ghost" / "agent.sqlite").is_file()
        listed = await ask(ws, "session.list", {})
        assert [s["id"] for s in listed["result"]["sessions"]] == ["s"]
        assert (await ask(ws, "events.load", {"session_id": "s"}))["result"] == {"events": []}


async def test_agent_default_strategy_and_import_create_the_agent(server: RunningServer) -> None:
    async with SessionClient(server.url, "by-strategy") as client:
        assert (await client.set_strategy(None, {"mode": "compact"}))["agent"]["mode"] == "compact"
    async with SessionClient(server.url, "source") as source:
        sid = await source.create_session()
        await source.append_events(sid, [{"content": "hello"}])
        exported = await source.export_session(sid)
    async with SessionClient(server.url, "by-import") as client:
        imported = await client.import_session(exported["files"])
        events = await client.load_events(imported["session_id"])
        assert [e.content for e in events] == ["hello"]
    assert server.registry.list_agents() == ["by-import", "by-strategy", "source"]


async def test_an_evicted_actor_leaves_memory_with_its_store(server: RunningServer) -> None:
    registry = server.registry
    async with SessionClient(server.url, "evicted") as client:
        sid = await client.create_session()
        await client.append_events(sid, [{"content": "kept"}])
    actor = await registry.get("evicted")
    assert actor.is_open
    await actor.mirror.drain()  # its JSONL files are written: nothing keeps it busy
    ref = weakref.ref(actor)
    del actor
    assert await registry.hibernate_idle(older_than=0) == 1
    gc.collect()
    assert ref() is None, gc.get_referrers(ref()) if ref() is not None else ""
    assert not registry.has_actor("evicted") and registry.actor_count == 0
    async with SessionClient(server.url, "evicted") as client:  # it comes back from disk
        assert [e.content for e in await client.load_events(sid)] == ["kept"]


async def test_actors_over_the_open_bound_leave_memory(tmp_path: Path) -> None:
    async with running_server(tmp_path / "memory", registry_options={"max_open": 2}) as running:
        for n in range(6):
            async with SessionClient(running.url, f"agent-{n}") as client:
                await client.create_session(session_id="s")
        await running.registry.settle()
        gc.collect()
        assert running.registry.open_count <= 2
        assert running.registry.actor_count <= 2
        assert len(running.registry.list_agents()) == 6


async def test_agents_are_bounded_by_max_agents(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    options = {"max_agents": 2}
    async with running_server(memory, registry_options=options) as running:
        for agent in ("a1", "a2"):
            async with SessionClient(running.url, agent) as client:
                await client.create_session(session_id="s")
        async with SessionClient(running.url, "a3") as client:
            with pytest.raises(TooLargeError) as refused:
                await client.create_session(session_id="s")
            assert refused.value.data == {"field": "agent_id", "max_agents": 2}
            with pytest.raises(NotFoundError):
                await client.list_sessions()
        async with SessionClient(running.url, "a1") as client:
            await client.create_session(session_id="t")  # existing agents still write
    assert sorted(p.name for p in (memory / "agents").iterdir()) == ["a1", "a2"]
    # The count is read back from the folders after a restart.
    async with running_server(memory, registry_options=options) as running:
        async with SessionClient(running.url, "a4") as client:
            with pytest.raises(TooLargeError):
                await client.create_session()
        async with SessionClient(running.url, "a2") as client:
            assert len(await client.list_sessions()) == 1


async def test_a_refused_create_leaves_nothing_a_read_could_open(server: RunningServer) -> None:
    """A create refused before its write keeps no agent a later read would make."""
    async with connect(agent_url(server.url, "refused")) as ws:
        answer = await ask(ws, "session.create", {"session_id": "a/b"})
        assert answer["error"]["code"] == -32602
        for method, params in READS:
            answer = await ask(ws, method, params)
            assert answer["error"]["code"] == -32001, (method, answer)
    assert not (server.registry.memory_dir / "agents").exists()


async def test_a_session_strategy_of_an_unknown_agent_creates_nothing(
    server: RunningServer,
) -> None:
    async with connect(agent_url(server.url, "ghost")) as ws:
        params = {"session_id": "s", "strategy": {"mode": "compact"}}
        answer = await ask(ws, "memory.set_strategy", params)
        assert answer["error"]["code"] == -32001, answer
        assert answer["error"]["data"]["field"] == "agent_id"
    assert not (server.registry.memory_dir / "agents").exists()


async def test_refused_creates_do_not_use_up_max_agents(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    async with running_server(memory, registry_options={"max_agents": 2}) as running:
        async with SessionClient(running.url, "a1") as client:
            await client.create_session(session_id="s")
        for n in range(5):
            async with connect(agent_url(running.url, f"refused-{n}")) as ws:
                answer = await ask(ws, "session.create", {"session_id": "../x"})
                assert answer["error"]["code"] == -32602, answer
        async with SessionClient(running.url, "a2") as client:
            await client.create_session(session_id="s")
        async with SessionClient(running.url, "a3") as client:
            with pytest.raises(TooLargeError):
                await client.create_session(session_id="s")
    assert sorted(p.name for p in (memory / "agents").iterdir()) == ["a1", "a2"]


async def test_nfc_and_nfd_spellings_are_one_agent(server: RunningServer) -> None:
    nfd = unicodedata.normalize("NFD", "café-agent")
    nfc = unicodedata.normalize("NFC", "café-agent")
    assert nfd != nfc
    async with connect(agent_url(server.url, nfd)) as ws:
        assert (await ask(ws, "session.create", {"session_id": "s"}))["result"]
    async with connect(agent_url(server.url, nfc)) as ws:
        listed = await ask(ws, "session.list", {})
        assert [s["id"] for s in listed["result"]["sessions"]] == ["s"]
        duplicate = await ask(ws, "session.create", {"session_id": "s"})
        assert duplicate["error"]["code"] == -32002
    assert [p.name for p in (server.registry.memory_dir / "agents").iterdir()] == [nfc]
    async with SessionClient(server.url, None) as admin:
        assert await admin.list_agents() == [nfc]
    async with ActorRegistry(server.registry.memory_dir / "other") as registry:
        assert (await registry.get(nfd, create=True)).agent_id == nfc


async def test_a_token_pattern_in_nfd_matches_the_nfc_agent(tmp_path: Path) -> None:
    pattern = unicodedata.normalize("NFD", "é*")
    async with running_server(tmp_path / "memory", tokens=[f"tok:{pattern}"]) as running:
        agent = unicodedata.normalize("NFC", "élan")
        async with SessionClient(running.url, agent, token="tok") as client:
            await client.create_session()


async def test_session_list_of_a_thousand_unknown_agents_creates_nothing(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    proc = ServerProcess(memory)
    url = await asyncio.to_thread(proc.start)
    assert proc.proc is not None
    pid = proc.proc.pid

    async def unknown(start: int, count: int) -> None:
        for n in range(start, start + count):
            async with connect(agent_url(url, f"nobody-{n}")) as ws:
                answer = await ask(ws, "session.list", {})
                assert answer["error"]["code"] == -32001

    try:
        # The token encoding, which the registry loads on a worker thread at start-up,
        # adds about 64 MiB of RSS: a persist counts its turn's tokens, so its answer
        # comes after the load, and none of it can be counted as growth below.
        async with SessionClient(url, "warm") as warm:
            await warm.persist_turn(
                await warm.create_session(), [{"role": "user", "content": "hi"}]
            )
        # Warm up with a first thousand (connections, allocator arenas, caches), then
        # measure a second: nothing a read makes may stay behind, so RSS must not keep
        # growing. (Before the fix every unknown agent left an actor and a store: +64 MiB
        # per thousand.)
        await asyncio.gather(*(unknown(i * 250, 250) for i in range(4)))
        before = rss_kib(pid)
        await asyncio.gather(*(unknown(1000 + i * 250, 250) for i in range(4)))
        grown = rss_kib(pid) - before
        assert [p.name for p in (memory / "agents").iterdir()] == ["warm"]
        metrics = (await http_get(url, "/metrics")).body
        assert "\nsession_server_actors 1.0\n" in metrics  # the warm agent's alone
        assert "\nsession_server_open_agents 1.0\n" in metrics
        assert grown < 8 * 1024, f"RSS grew by {grown} KiB over a second 1,000 unknown agents"
    finally:
        proc.kill()


@pytest.mark.parametrize("agent", ["a\uff0fb", "ad\u200bmin", "x\u202etxt.exe", "\uff41gent"])
async def test_new_ids_that_look_like_others_are_refused(server: RunningServer, agent: str) -> None:
    """``agents.list`` never shows ``a／b`` (or an id with invisible characters): such an
    agent, session or event is never made."""
    async with connect(agent_url(server.url, agent)) as ws:
        answer = await ask(ws, "session.create", {"session_id": "s"})
        assert answer["error"]["code"] == -32602, answer
        assert answer["error"]["data"] == {"field": "agent_id"}
    async with connect(agent_url(server.url, "plain")) as ws:
        answer = await ask(ws, "session.create", {"session_id": f"s-{agent}"})
        assert answer["error"]["code"] == -32602, answer
        assert answer["error"]["data"] == {"field": "session_id"}
        assert (await ask(ws, "session.create", {"session_id": "s"}))["result"]
        event = {"id": f"e-{agent}", "action": "user_message", "content": "x"}
        answer = await ask(ws, "events.append", {"session_id": "s", "events": [event]})
        assert answer["error"]["code"] == -32602, answer
        assert answer["error"]["data"] == {"field": "params.events[0].id"}
    async with SessionClient(server.url, None) as admin:
        assert await admin.list_agents() == ["plain"]


async def test_an_agent_made_before_the_rule_stays_reachable(tmp_path: Path) -> None:
    old = "ad\u200bmin"
    async with (
        running_server(tmp_path / "memory") as running,
        SessionClient(running.url, "plain") as client,
    ):
        await client.create_session(None, "s")
    agents = tmp_path / "memory" / "agents"
    (agents / "plain").rename(agents / old)
    async with (
        running_server(tmp_path / "memory") as running,
        connect(agent_url(running.url, old)) as ws,
    ):
        listed = await ask(ws, "session.list", {})
        assert [s["id"] for s in listed["result"]["sessions"]] == ["s"]
