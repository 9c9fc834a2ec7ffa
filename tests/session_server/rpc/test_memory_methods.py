"""memory.*, context.render, export/import and the snapshot index over a real server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from session_server.client import SessionClient
from session_server.values.errors import ConflictError, InvalidParamsError, NotFoundError
from tests.support.server import RunningServer, running_server

AGENT = "memory agent"


def turn(n: int) -> list[dict[str, Any]]:
    call = f"call-{n}"
    return [
        {"role": "user", "content": f"question {n}"},
        {
            "role": "assistant",
            "tool_calls": [{"id": call, "name": "lookup", "arguments": {"n": n}}],
        },
        {"role": "tool", "tool_call_id": call, "name": "lookup", "content": f"output {n} " * 30},
        {"role": "assistant", "content": f"answer {n}"},
    ]


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "memory") as running:
        yield running


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[SessionClient]:
    async with SessionClient(server.url, AGENT) as c:
        yield c


async def session_with_turns(client: SessionClient, turns: int) -> str:
    sid = (await client.call("session.create", {}))["session_id"]
    for n in range(1, turns + 1):
        await client.call("turn.persist", {"session_id": sid, "messages": turn(n)})
    return str(sid)


async def test_strategy_round_trip_and_refusals(client: SessionClient) -> None:
    sid = await session_with_turns(client, 1)
    out = await client.call(
        "memory.set_strategy", {"session_id": sid, "strategy": {"mode": "compact"}}
    )
    assert out["session"] == {"mode": "compact"} and out["effective"]["compact_keep"] == 2
    got = await client.call("memory.get_strategy", {"session_id": sid})
    assert got["effective"]["mode"] == "compact"
    with pytest.raises(InvalidParamsError, match="unknown key 'nope'"):
        await client.call("memory.set_strategy", {"session_id": sid, "strategy": {"nope": 1}})
    with pytest.raises(InvalidParamsError, match="compact_keep"):
        await client.call(
            "memory.set_strategy", {"session_id": sid, "strategy": {"compact_keep": "two"}}
        )
    with pytest.raises(NotFoundError):
        await client.call("memory.get_strategy", {"session_id": "missing"})


async def test_build_with_strategy_and_compact(client: SessionClient) -> None:
    sid = await session_with_turns(client, 5)
    noop = await client.call("memory.compact", {"session_id": sid, "strategy": {"mode": "none"}})
    assert noop["compacted"] is False and "none" in noop["reason"]
    built = await client.call(
        "context.build",
        {"session_id": sid, "strategy": {"mode": "compact", "compact_trigger_turns": 3}},
    )
    tools = [m for m in built["messages"] if m["role"] == "tool"]
    assert [m.get("compacted", False) for m in tools] == [True, True, True, False, False]
    assert tools[0]["content"].startswith("⟦removed: tool output for lookup (call_id=call-1)")
    done = await client.call(
        "memory.compact",
        {"session_id": sid, "strategy": {"mode": "summarize", "raw_tail_turns": 2}},
    )
    assert done["compacted"] is True and done["strategy"] == "summarize"
    after = await client.call("context.build", {"session_id": sid})
    assert "[MEMORY:EPISODIC]" in after["system_instructions"][-1]


async def test_render_every_adapter(client: SessionClient) -> None:
    sid = await session_with_turns(client, 2)
    names = await client.call("context.render", {"session_id": sid, "adapter": "openai-chat"})
    assert names["payload"]["messages"][0] == {"role": "user", "content": "question 1"}
    for adapter, key in (
        ("workers-ai", "messages"),
        ("openai-responses", "input"),
        ("anthropic", "messages"),
    ):
        out = await client.call(
            "context.render",
            {"session_id": sid, "adapter": adapter, "system_instructions": ["Be brief."]},
        )
        assert out["adapter"] == adapter and out["payload"][key]
    with pytest.raises(InvalidParamsError, match="unknown adapter 'gemini'"):
        await client.call("context.render", {"session_id": sid, "adapter": "gemini"})


async def test_memory_view_and_snapshot_index(server: RunningServer, client: SessionClient) -> None:
    sid = await session_with_turns(client, 2)
    view = await client.call("memory.view", {"session_id": sid})
    assert view["agent_id"] == AGENT
    kinds = [e["kind"] for e in view["conversation"]]
    assert kinds == ["message", "tool_call", "message"] * 2
    assert len(view["raw_traces"]) == 8
    limited = await client.call(
        "memory.view", {"session_id": sid, "raw_trace_limit": 3, "collapse_tools": False}
    )
    assert len(limited["raw_traces"]) == 3
    async with SessionClient(server.url, None) as root:
        page = await root.call("memory.list_snapshots", {"search": "MEMORY", "page_size": 1})
        assert page["total"] == 1 and page["entries"][0]["agent_id"] == AGENT
        assert (await root.call("memory.list_snapshots", {"search": "zzz"}))["total"] == 0
        second = await session_with_turns(client, 1)
        await client.call("memory.view", {"session_id": second})  # its mirror is written
        folders = await root.call("memory.list_snapshots", {})
        agents = await root.call("memory.list_snapshots", {"group": "agent"})
        assert folders["total"] == 2 and agents["total"] == 1
        assert agents["entries"][0]["session_count"] == 2
        with pytest.raises(InvalidParamsError, match="group"):
            await root.call("memory.list_snapshots", {"group": "session"})


async def test_export_then_import_over_rpc(client: SessionClient) -> None:
    sid = await session_with_turns(client, 3)
    exported = await client.call("export.session", {"session_id": sid, "name": "copy"})
    assert exported["name"] == "copy"
    assert exported["files"]["raw_traces.jsonl"].count("\n") == 12
    # The originals are still here: a plain import (ids kept) is refused, a copy is not.
    with pytest.raises(ConflictError, match="already exists"):
        await client.call("import.session", {"files": exported["files"]})
    imported = await client.call("import.session", {"files": exported["files"], "new_ids": True})
    assert imported["lossless"] and imported["session_id"] != sid
    again = await client.call("export.session", {"session_id": imported["session_id"]})
    assert again["files"]["raw_traces.jsonl"].count("\n") == 12
    original = await client.call("events.load", {"session_id": sid, "limit": 100})
    copy = await client.call("events.load", {"session_id": imported["session_id"], "limit": 100})
    assert [e["seq"] for e in copy["events"]] == [e["seq"] for e in original["events"]]
    assert not {e["id"] for e in copy["events"]} & {e["id"] for e in original["events"]}
    with pytest.raises(InvalidParamsError, match="unknown file name"):
        await client.call("import.session", {"files": {"/etc/passwd": "x"}})


async def test_compaction_metrics_on_v1_and_http(
    server: RunningServer, client: SessionClient
) -> None:
    sid = await session_with_turns(client, 3)
    await client.call(
        "memory.compact", {"session_id": sid, "strategy": {"mode": "compact", "compact_keep": 1}}
    )
    async with SessionClient(server.url, None) as root:
        metrics = await root.call("metrics.get", {})
    assert metrics["compactions"] == {"compact": 1, "summarize": 0}
    assert metrics["items_removed"] == 2
    host, port = server.url.removeprefix("ws://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    body = (await reader.read()).decode()
    writer.close()
    assert body.startswith("HTTP/1.1 200")
    assert 'session_server_memory_compactions_total{strategy="compact"} 1.0' in body
