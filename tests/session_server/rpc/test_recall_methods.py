"""memory.search, memory.expand, memory.tools, memory.tool_call and memory.reindex over a
real server, through the async and the sync client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from session_server.auth import mint_token
from session_server.client import SessionClient
from session_server.client.sync_client import SyncSessionClient
from session_server.runtime.model_tools import MAX_TOOL_RESULT_CHARS
from session_server.values.errors import ForbiddenError, InvalidParamsError, NotFoundError
from tests.support.server import RunningServer, running_server

AGENT = "recall agent"
SECRET = "recall-secret-" + "x" * 32


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "memory", secrets=[SECRET]) as running:
        yield running


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[SessionClient]:
    token = mint_token(SECRET, agents=["*"], scope="admin", ttl=600)
    async with SessionClient(server.url, AGENT, token=token) as c:
        yield c


async def _session(client: SessionClient, *texts: str) -> str:
    sid = await client.create_session()
    await client.call(
        "events.append",
        {
            "session_id": sid,
            "events": [{"action": "user_message", "content": t} for t in texts],
        },
    )
    return sid


async def test_search_over_rpc(client: SessionClient) -> None:
    sid = await _session(client, "the invoice number is 4471-B", "unrelated chatter")
    found = await client.search("invoice")
    assert found["indexing"] is False
    (hit,) = found["hits"]
    assert set(hit) == {"session_id", "seq", "event_id", "action", "snippet", "score", "in_context"}
    assert (hit["session_id"], hit["seq"], hit["in_context"]) == (sid, 1, True)
    assert (await client.search('"number is 4471"', session_id=sid))["hits"][0]["seq"] == 1
    assert (await client.search('(( NOT "" OR *'))["hits"] == []
    with pytest.raises(InvalidParamsError, match="limit"):
        await client.search("x", limit=51)
    with pytest.raises(InvalidParamsError, match="actions"):
        await client.call("memory.search", {"query": "x", "actions": ["nope"]})
    with pytest.raises(InvalidParamsError, match="query"):
        await client.call("memory.search", {})
    with pytest.raises(NotFoundError):
        await client.search("invoice", session_id="missing")


async def test_a_token_limited_to_sessions_finds_only_its_own(
    server: RunningServer, client: SessionClient
) -> None:
    mine = await _session(client, "shared word in mine")
    theirs = await _session(client, "shared word in theirs")
    token = mint_token(SECRET, agents=["*"], sessions=[mine], scope="read", ttl=600)
    async with SessionClient(server.url, AGENT, token=token) as limited:
        hits = (await limited.search("shared"))["hits"]
        assert [h["session_id"] for h in hits] == [mine]
        with pytest.raises(ForbiddenError, match="session_id"):
            await limited.search("shared", session_id=theirs)
        with pytest.raises(ForbiddenError):
            await limited.tool_call(theirs, "recall_search", {"query": "shared"})
        assert (await limited.memory_tools("anthropic"))[0]["name"] == "recall_search"


async def test_expand_over_rpc(client: SessionClient) -> None:
    sid = await _session(client, "one", "two", "three", "four")
    out = await client.expand(sid, 2, 3)
    assert [e["seq"] for e in out["events"]] == [2, 3]
    assert [m["content"] for m in out["messages"]] == ["two", "three"]
    with pytest.raises(NotFoundError):
        await client.expand("missing", 1, 2)
    with pytest.raises(InvalidParamsError, match="from_seq"):
        await client.call("memory.expand", {"session_id": sid, "from_seq": 0, "to_seq": 2})


@pytest.mark.parametrize("adapter", ["openai-chat", "openai-responses", "anthropic", "workers-ai"])
async def test_tools_in_each_format(client: SessionClient, adapter: str) -> None:
    tools = await client.memory_tools(adapter)
    names = [t.get("name") or t.get("function", {}).get("name") for t in tools]
    assert names[:2] == ["recall_search", "recall_expand"]


async def test_unknown_adapter_is_refused(client: SessionClient) -> None:
    with pytest.raises(InvalidParamsError, match="adapter"):
        await client.memory_tools("nope")


async def test_tool_calls(client: SessionClient) -> None:
    sid = await _session(client, "the gate code is 9137", *[f"filler {i}" for i in range(10)])
    out = await client.tool_call(sid, "recall_search", '{"query": "gate code"}')
    assert out["is_error"] is False
    assert f"session_id={sid} seq=1" in out["content"] and "9137" in out["content"]
    out = await client.tool_call(sid, "recall_expand", {"from_seq": 1, "to_seq": 2})
    assert out["is_error"] is False and "#1 user_message: the gate code is 9137" in out["content"]
    for name, args, message in [
        ("recall_search", "{not json", "not valid JSON"),
        ("recall_search", "[1]", "JSON object"),
        ("recall_search", {}, "'query' is required"),
        ("recall_expand", {"from_seq": "a", "to_seq": 2}, "integer"),
        ("recall_expand", {"from_seq": 5, "to_seq": 2}, "before"),
        ("recall_expand", {"from_seq": 1, "to_seq": 2, "session_id": "missing"}, "missing"),
        ("no_such_tool", {}, "unknown tool"),
    ]:
        out = await client.tool_call(sid, name, args)
        assert out["is_error"] is True, (name, args)
        assert message in out["content"], out["content"]
    with pytest.raises(NotFoundError):
        await client.tool_call("missing", "recall_search", {"query": "x"})


async def test_a_tool_result_is_bounded(client: SessionClient) -> None:
    huge = "needle " + "haystack " * 5_000
    sid = await _session(client, *[huge] * 40)
    out = await client.tool_call(sid, "recall_expand", {"from_seq": 1, "to_seq": 40})
    assert len(out["content"]) <= MAX_TOOL_RESULT_CHARS
    out = await client.tool_call(sid, "recall_search", {"query": "needle", "limit": 20})
    assert len(out["content"]) <= MAX_TOOL_RESULT_CHARS and not out["is_error"]


async def test_reindex_over_rpc(server: RunningServer, client: SessionClient) -> None:
    await _session(client, "alpha", "beta")
    assert await client.reindex() == 2
    actor = await server.registry.get(AGENT)
    await actor.recall_settled()
    assert (await client.search("beta"))["indexing"] is False
    assert (await client.search("beta"))["hits"][0]["seq"] == 2


async def test_the_sync_client_has_the_methods(
    server: RunningServer, client: SessionClient
) -> None:
    sid = await _session(client, "synchronous kiwi")
    token = mint_token(SECRET, agents=["*"], scope="admin", ttl=600)

    def run() -> dict[str, Any]:
        with SyncSessionClient(server.url, AGENT, token=token) as sync:
            return {
                "search": sync.search("kiwi"),
                "expand": sync.expand(sid, 1, 1),
                "tools": sync.memory_tools("openai-chat"),
                "call": sync.tool_call(sid, "recall_search", {"query": "kiwi"}),
            }

    out = await asyncio.to_thread(run)
    assert out["search"]["hits"][0]["session_id"] == sid
    assert out["expand"]["events"][0]["content"] == "synchronous kiwi"
    assert out["tools"][0]["function"]["name"] == "recall_search"
    assert "kiwi" in out["call"]["content"]
    msgspec.json.encode(out)
