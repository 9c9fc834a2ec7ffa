"""Every agent-endpoint method and agents.list over a real WebSocket, checked on the wire."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from websockets.asyncio.client import ClientConnection, connect

from session_server.client import SessionClient
from tests.support.server import RunningServer, running_server

AGENT = "agent with spaces é"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "memory") as running:
        yield running


@pytest.fixture
async def ws(server: RunningServer) -> AsyncIterator[ClientConnection]:
    async with connect(f"{server.url}/v1/agents/{quote(AGENT, safe='')}") as conn:
        yield conn


class Rpc:
    def __init__(self, conn: ClientConnection) -> None:
        self.conn = conn
        self.next_id = 0

    async def __call__(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        await self.conn.send(
            json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        )
        while True:
            answer = json.loads(await self.conn.recv())
            if "id" in answer:
                assert answer["id"] == self.next_id
                return dict(answer)


async def test_session_lifecycle(ws: ClientConnection) -> None:
    rpc = Rpc(ws)
    created = (await rpc("session.create", metadata={"topic": "x"}, session_id="s-1"))["result"]
    assert created["session_id"] == "s-1"
    assert created["id"] == "s-1"
    assert created["agent_id"] == AGENT
    assert created["metadata"] == {"topic": "x"}
    assert created["last_seq"] == 0
    generated = (await rpc("session.create"))["result"]["session_id"]
    assert generated and generated != "s-1"

    got = (await rpc("session.get", session_id="s-1"))["result"]
    assert got["id"] == "s-1" and got["metadata"] == {"topic": "x"}
    listed = (await rpc("session.list"))["result"]["sessions"]
    assert sorted(s["id"] for s in listed) == sorted(["s-1", generated])

    dup = await rpc("session.create", session_id="s-1")
    assert dup["error"]["code"] == -32002

    assert (await rpc("session.delete", session_id="s-1"))["result"] == {"deleted": True}
    assert (await rpc("session.delete", session_id="s-1"))["result"] == {"deleted": False}
    missing = await rpc("session.get", session_id="s-1")
    assert missing["error"]["code"] == -32001
    assert "s-1" in missing["error"]["message"]


async def test_events_append_load_delete(ws: ClientConnection) -> None:
    rpc = Rpc(ws)
    sid = (await rpc("session.create"))["result"]["session_id"]
    appended = await rpc(
        "events.append",
        session_id=sid,
        events=[
            {"action": "user_message", "content": "hello"},
            {
                "action": "tool_call_request",
                "tool_calls": [{"id": "c1", "name": "f", "arguments": {"q": 1}}],
            },
            {"action": "tool_result", "content": "42", "tool_call_id": "c1", "tool_name": "f"},
            {"action": "agent_message", "content": "it is 42", "model": "m"},
        ],
        idempotency_key="k1",
    )
    assert appended["result"] == {"seqs": [1, 2, 3, 4], "last_seq": 4, "compaction_required": False}
    other = await rpc(
        "events.append",
        session_id=sid,
        events=[{"action": "user_message", "content": "hello"}],
        idempotency_key="k1",
    )
    # The same key with different content is a conflict, not a replay of the first answer.
    assert other["error"]["code"] == -32002
    assert other["error"]["data"] == {"reason": "idempotency_mismatch", "field": "idempotency_key"}

    events = (await rpc("events.load", session_id=sid))["result"]["events"]
    assert [e["seq"] for e in events] == [1, 2, 3, 4]
    assert events[0]["session_id"] == sid and events[0]["id"] and events[0]["timestamp"] > 0
    assert events[1]["tool_calls"] == [{"id": "c1", "name": "f", "arguments": {"q": 1}}]
    assert events[2]["tool_call_id"] == "c1" and events[2]["is_success"] is True
    assert events[3]["model"] == "m"

    tail = (await rpc("events.load", session_id=sid, limit=2))["result"]["events"]
    assert [e["seq"] for e in tail] == [3, 4]
    head = (await rpc("events.load", session_id=sid, limit=1, tail=False))["result"]["events"]
    assert [e["seq"] for e in head] == [1]
    after = (await rpc("events.load", session_id=sid, after_seq=2))["result"]["events"]
    assert [e["seq"] for e in after] == [3, 4]
    only = (await rpc("events.load", session_id=sid, actions=["agent_message"]))["result"]
    assert [e["seq"] for e in only["events"]] == [4]
    unlimited = (await rpc("events.load", session_id=sid, limit=None))["result"]["events"]
    assert len(unlimited) == 4

    deleted = await rpc("events.delete", session_id=sid, event_ids=[events[0]["id"], "nope"])
    assert deleted["result"] == {"deleted": 1}
    left = (await rpc("events.load", session_id=sid))["result"]["events"]
    assert [e["seq"] for e in left] == [2, 3, 4]

    conflict = await rpc(
        "events.append",
        session_id=sid,
        events=[{"action": "user_message", "content": "x"}],
        expected_last_seq=1,
    )
    assert conflict["error"]["code"] == -32002
    assert conflict["error"]["data"]["last_seq"] == 4


async def test_context_build_and_turn_persist(ws: ClientConnection) -> None:
    rpc = Rpc(ws)
    sid = (await rpc("session.create"))["result"]["session_id"]
    turn = [
        {"role": "user", "content": "what is 6*7?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "name": "calc", "arguments": {"expr": "6*7"}}],
        },
        {"role": "tool", "content": "42", "tool_call_id": "c1", "name": "calc"},
        {"role": "assistant", "content": "42"},
    ]
    persisted = await rpc("turn.persist", session_id=sid, messages=turn, usage={"prompt_tokens": 9})
    assert persisted["result"] == {
        "seqs": [1, 2, 3, 4],
        "last_seq": 4,
        "compaction_required": False,
        "budget_exceeded": False,
    }

    built = (await rpc("context.build", session_id=sid, system_instructions="be brief"))["result"]
    assert built["system_instructions"] == ["be brief"]
    assert built["base_seq"] == 4
    assert built["token_count"] > 0
    assert built["messages"][0] == {"role": "user", "content": "what is 6*7?"}
    assert built["messages"][1]["tool_calls"][0]["name"] == "calc"
    assert built["messages"][2]["tool_call_id"] == "c1"
    assert [m["role"] for m in built["messages"]] == ["user", "assistant", "tool", "assistant"]

    limited = (await rpc("context.build", session_id=sid, limit=1))["result"]
    assert [m["role"] for m in limited["messages"]] == ["assistant"]

    stale = await rpc(
        "turn.persist", session_id=sid, messages=[{"role": "user", "content": "x"}], base_seq=2
    )
    assert stale["error"]["code"] == -32002
    assert stale["error"]["data"]["last_seq"] == 4
    fresh = await rpc(
        "turn.persist", session_id=sid, messages=[{"role": "user", "content": "x"}], base_seq=4
    )
    assert fresh["result"]["seqs"] == [5]
    unknown = await rpc(
        "turn.persist", session_id="nope", messages=[{"role": "user", "content": "x"}]
    )
    assert unknown["error"]["code"] == -32001


async def test_subscribe_and_unsubscribe(ws: ClientConnection, server: RunningServer) -> None:
    rpc = Rpc(ws)
    sid = (await rpc("session.create"))["result"]["session_id"]
    await rpc("events.append", session_id=sid, events=[{"content": "before"}])
    sub = await rpc("events.subscribe", session_id=sid)
    assert sub["result"] == {"session_id": sid, "last_seq": 1, "stream": None}

    async with connect(f"{server.url}/v1/agents/{quote(AGENT, safe='')}") as other:
        answer = await Rpc(other)("events.append", session_id=sid, events=[{"content": "after"}])
        assert answer["result"]["seqs"] == [2]
    note = json.loads(await ws.recv())
    assert note["method"] == "events.appended"
    assert "id" not in note
    assert note["params"]["session_id"] == sid
    assert [(e["seq"], e["content"]) for e in note["params"]["events"]] == [(2, "after")]

    assert (await rpc("events.unsubscribe", session_id=sid))["result"] == {"unsubscribed": True}
    assert (await rpc("events.unsubscribe", session_id=sid))["result"] == {"unsubscribed": False}
    await rpc("events.append", session_id=sid, events=[{"content": "unseen"}])
    # The next frame is the answer to this request, not a notification.
    answer = await rpc("session.get", session_id=sid)
    assert answer["result"]["last_seq"] == 3

    missing = await rpc("events.subscribe", session_id="nope")
    assert missing["error"]["code"] == -32001


async def test_agents_list_on_server_endpoint(server: RunningServer) -> None:
    for agent in ("b-agent", "a-agent"):
        async with connect(f"{server.url}/v1/agents/{agent}") as conn:
            await Rpc(conn)("session.create")
    async with connect(f"{server.url}/v1") as conn:
        rpc = Rpc(conn)
        assert (await rpc("agents.list"))["result"] == {"agents": ["a-agent", "b-agent"]}
        wrong = await rpc("session.list")
        assert wrong["error"]["code"] == -32601
        assert "session.list" in wrong["error"]["message"]
    async with connect(f"{server.url}/v1/agents/a-agent") as conn:
        wrong = await Rpc(conn)("agents.list")
        assert wrong["error"]["code"] == -32601
        assert "/v1" in wrong["error"]["message"]


async def test_agents_list_is_paged(server: RunningServer) -> None:
    """At most ``limit`` (1000 by default) ids per answer, ``next_after`` while more follow;
    the client follows the pages."""
    root = server.registry.memory_dir / "agents"
    names = [f"agent-{i:04d}" for i in range(1003)]
    for name in names:
        (root / name).mkdir(parents=True)
    async with connect(f"{server.url}/v1") as conn:
        rpc = Rpc(conn)
        first = (await rpc("agents.list"))["result"]
        assert first == {"agents": names[:1000], "next_after": names[999]}
        rest = (await rpc("agents.list", after=first["next_after"]))["result"]
        assert rest == {"agents": names[1000:]}  # the last page has no next_after
        page = (await rpc("agents.list", after="agent-0001", limit=2))["result"]
        assert page == {"agents": names[2:4], "next_after": names[3]}
        for bad in ({"limit": 0}, {"limit": 1001}, {"after": ""}, {"after": 7}):
            answer = await rpc("agents.list", **bad)
            assert answer["error"]["code"] == -32602, bad
            assert answer["error"]["data"]["field"].startswith("params."), bad
    async with SessionClient(server.url, None) as client:
        assert await client.list_agents() == names
