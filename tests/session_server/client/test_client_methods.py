"""The complete client: one method per RPC method, the new session methods end to end,
the blocking client with reconnection, and ``follow`` across a server restart."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from session_server.client import SessionClient
from session_server.client.follow import follow
from session_server.client.sync_client import SyncSessionClient
from session_server.rpc.table import BUILTIN_METHODS as METHODS
from session_server.values.errors import ConflictError, InvalidParamsError, NotFoundError
from session_server.values.events import ContextMessage, SessionEvent
from tests.session_server.client.test_client_imports import heavy, loaded_by
from tests.support.server import RestartableServer, RunningServer, running_server, turn_messages

AGENT = "clients"

# RPC method -> the SessionClient method that calls it. ``events.unsubscribe`` is sent by
# ``Subscription.close()``. A new RPC method needs its client method here and in client/session_client.py.
CLIENT_METHODS = {
    "memory.usage": "memory_usage",
    "memory.usage_chart": "usage_chart",
    "memory.set_budget": "set_budget",
    "memory.get_budget": "get_budget",
    "retention.set": "retention_set",
    "retention.get": "retention_get",
    "retention.preview": "retention_preview",
    "agent.backup": "backup_agent",
    "agent.restore": "restore_agent",
    "session.create": "create_session",
    "session.get": "get_session",
    "session.list": "session_page",
    "session.update": "update_session",
    "session.delete": "delete_session",
    "session.clear": "clear_session",
    "session.fork": "fork_session",
    "session.rewind": "rewind_session",
    "session.branches": "session_branches",
    "events.append": "append_events",
    "events.load": "load_events",
    "events.delete": "delete_events",
    "events.pop": "pop_event",
    "events.subscribe": "subscribe",
    "context.build": "build_context",
    "context.render": "render_context",
    "turn.persist": "persist_turn",
    "memory.get_strategy": "get_strategy",
    "memory.set_strategy": "set_strategy",
    "memory.compact": "compact",
    "memory.view": "memory_view",
    "export.session": "export_session",
    "import.session": "import_session",
    "agents.list": "list_agents",
    "memory.list_snapshots": "list_snapshots",
    "adapters.list": "list_adapters",
    "metrics.get": "get_metrics",
    "stream.open": "stream_open",
    "stream.append": "stream_append",
    "stream.close": "stream_close",
    "memory.blocks.set": "set_block",
    "memory.blocks.get": "get_block",
    "memory.blocks.list": "list_blocks",
    "memory.blocks.history": "block_history",
    "memory.blocks.revert": "revert_block",
    "memory.blocks.delete": "delete_block",
    "memory.search": "search",
    "memory.expand": "expand",
    "memory.tools": "memory_tools",
    "memory.tool_call": "tool_call",
    "memory.reindex": "reindex",
    "cluster.status": "cluster_status",
    "cluster.owner": "cluster_owner",
}


def test_every_rpc_method_has_a_client_method() -> None:
    missing = sorted(set(METHODS) - set(CLIENT_METHODS) - {"events.unsubscribe"})
    assert missing == [], f"RPC methods without a SessionClient method: {missing}"
    for rpc, name in CLIENT_METHODS.items():
        assert rpc in METHODS, rpc
        assert callable(getattr(SessionClient, name)), name


def test_the_helpers_stay_as_light_as_the_client() -> None:
    modules = loaded_by("import session_server.client.sync_client, session_server.client.follow")
    assert heavy(modules) == []


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "memory") as running:
        yield running


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[SessionClient]:
    async with SessionClient(server.url, AGENT) as c:
        yield c


async def test_get_or_create(client: SessionClient) -> None:
    first = await client.get_or_create_session("s1", metadata={"user": "ada"})
    again = await client.get_or_create_session("s1", metadata={"user": "bob"})
    assert (first["created"], again["created"]) == (True, False)
    assert again["metadata"] == {"user": "ada"}  # an existing session is not changed
    assert await client.create_session(session_id="s1", if_exists="return") == "s1"
    with pytest.raises(ConflictError, match="already exists"):
        await client.create_session(session_id="s1")
    with pytest.raises(InvalidParamsError, match="if_exists"):
        await client.call("session.create", {"session_id": "s2", "if_exists": "maybe"})


async def test_update_and_list_with_paging_and_filter(client: SessionClient) -> None:
    for i in range(7):
        meta = {"user": "ada" if i % 2 else "bob", "n": i, "vip": i == 3, "note": None}
        await client.create_session(meta, session_id=f"s{i}")
    updated = await client.update_session("s0", {"user": "ada", "n": 0.0, "tags": ["x"]})
    assert updated["metadata"] == {"user": "ada", "n": 0.0, "tags": ["x"]}
    assert (await client.get_session("s0"))["metadata"]["tags"] == ["x"]
    ada = await client.list_sessions(metadata={"user": "ada"})
    assert sorted(s["id"] for s in ada) == ["s0", "s1", "s3", "s5"]
    assert [s["id"] for s in await client.list_sessions(metadata={"vip": True})] == ["s3"]
    assert [s["id"] for s in await client.list_sessions(metadata={"n": 3})] == ["s3"]
    assert len(await client.list_sessions(metadata={"note": None})) == 6  # s0 lost its note
    assert await client.list_sessions(metadata={"user": "nobody"}) == []
    page = await client.session_page(limit=3)
    assert (len(page.sessions), page.total, page.next_offset) == (3, 7, 3)
    last = await client.session_page(limit=3, offset=6)
    assert (len(last.sessions), last.next_offset) == (1, None)
    everything = [s["id"] async for s in client.iter_sessions(page_size=2)]
    assert sorted(everything) == [f"s{i}" for i in range(7)]
    with pytest.raises(InvalidParamsError, match=r"metadata\.tags"):
        await client.list_sessions(metadata={"tags": ["x"]})
    assert (await client.update_session("s0", None))["metadata"] is None
    with pytest.raises(NotFoundError):
        await client.update_session("missing", {})


async def test_pop_skips_compaction_records_and_is_guarded(client: SessionClient) -> None:
    sid = await client.create_session()
    await client.persist_turn(sid, turn_messages(1))
    await client.persist_turn(sid, turn_messages(2))
    compacted = await client.compact(sid, strategy={"mode": "compact", "compact_keep": 1})
    assert compacted["compacted"] is True
    events = await client.load_events(sid, limit=None)
    assert events[-1].action == "compaction"
    newest = events[-2]
    with pytest.raises(ConflictError, match="event_id"):
        await client.pop_event(sid, event_id=events[0].id)
    popped = await client.pop_event(sid, event_id=newest.id)
    assert popped is not None and popped.id == newest.id and popped.content == "answer 2"
    left = await client.load_events(sid, limit=None)
    assert [e.seq for e in left] == [e.seq for e in events if e.id != newest.id]
    # Rewrite in place: same id and seq, new content.
    tool = left[-2]
    replaced = SessionEvent(
        action="tool_result", content="edited", tool_call_id="call-2", tool_name="lookup"
    )
    assert (await client.pop_event(sid, replace_with=replaced)) == tool
    after = await client.load_events(sid, limit=None)
    assert (after[-2].id, after[-2].seq, after[-2].content) == (tool.id, tool.seq, "edited")
    # New appends never reuse a seq.
    result = await client.persist_turn(sid, [ContextMessage(role="user", content="more")])
    assert result.seqs == [events[-1].seq + 1]
    empty = await client.create_session()
    assert await client.pop_event(empty) is None


async def test_clear_keeps_session_metadata_and_strategy(client: SessionClient) -> None:
    sid = await client.create_session({"k": 1})
    await client.set_strategy(sid, {"mode": "compact"})
    await client.persist_turn(sid, turn_messages(1))
    assert await client.clear_session(sid) == 4
    assert await client.load_events(sid, limit=None) == []
    assert (await client.get_session(sid))["metadata"] == {"k": 1}
    assert (await client.get_strategy(sid))["session"]["mode"] == "compact"
    assert (await client.persist_turn(sid, turn_messages(2))).seqs == [5, 6, 7, 8]
    with pytest.raises(NotFoundError):
        await client.clear_session("missing")


async def test_memory_render_transfer_and_server_methods(
    server: RunningServer, client: SessionClient
) -> None:
    sid = await client.create_session()
    await client.persist_turn(sid, turn_messages(1))
    rendered = await client.render_context(sid, "openai-chat", system_instructions="Be brief.")
    assert rendered["payload"]["messages"][0] == {"role": "system", "content": "Be brief."}
    assert (await client.set_strategy(None, {"mode": "compact"}))["agent"]["mode"] == "compact"
    view = await client.memory_view(sid, include_archive=False)
    assert view["raw_traces"]
    exported = await client.export_session(sid, name="copy")
    imported = await client.import_session(exported["files"], new_ids=True)
    assert imported["session_id"] != sid and imported["lossless"]
    async with SessionClient(server.url, None) as admin:
        assert await admin.list_agents() == [AGENT]
        assert "openai-responses" in await admin.list_adapters()
        assert "compactions" in await admin.get_metrics()
        assert (await admin.list_snapshots(page_size=5))["total"] >= 1
        assert (await admin.list_snapshots(group="agent"))["total"] == 1
    backup = await client.backup_agent()
    assert backup["sessions"] == 2 and backup["data"]
    restored = await client.restore_agent(backup["data"], backup["sha256"], force=True)
    assert restored["sessions"] == 2


async def test_follow_resumes_across_a_restart(tmp_path: Path) -> None:
    async with RestartableServer(tmp_path / "memory") as server:
        async with SessionClient(server.url, AGENT) as writer:
            sid = await writer.create_session()
            await writer.persist_turn(sid, turn_messages(1))
        seen: list[int] = []
        stream = follow(server.url, AGENT, sid, after_seq=2, retry_delay=0.01)
        seen.extend([(await anext(stream)).seq, (await anext(stream)).seq])
        assert seen == [3, 4]
        await server.restart()  # the follower's connection drops here
        async with SessionClient(server.url, AGENT) as writer:
            await writer.persist_turn(sid, turn_messages(2))
        async for event in stream:
            seen.append(event.seq)
            if event.seq == 8:
                break
        await stream.aclose()
        assert seen == [3, 4, 5, 6, 7, 8]


async def test_sync_client_reconnects_and_serves_any_loop(tmp_path: Path) -> None:
    async with RestartableServer(tmp_path / "memory") as server:
        client = SyncSessionClient(server.url, AGENT, retry_delay=0.01)
        try:
            sid = await client.acall("create_session", {"who": "sync"})
            await client.acall("persist_turn", sid, turn_messages(1))
            await server.restart()
            # The dropped connection is replaced; the keyed write happens once.
            result = await client.acall("persist_turn", sid, turn_messages(2))
            assert result.seqs == [5, 6, 7, 8]

            def blocking() -> list[str]:
                ctx = client.build_context(sid)  # a blocking call from another thread
                # Loops that come and go, as Runner.run_sync creates them.
                asyncio.run(client.acall("persist_turn", sid, turn_messages(3)))
                asyncio.run(client.acall("persist_turn", sid, turn_messages(4)))
                return [m.content for m in ctx.messages]

            contents = await asyncio.to_thread(blocking)
            assert contents[-1] == "answer 2"
            assert len(await client.acall("load_events", sid, limit=None)) == 16
            with pytest.raises(AttributeError):
                client.subscribe  # noqa: B018
        finally:
            await asyncio.to_thread(client.close)
