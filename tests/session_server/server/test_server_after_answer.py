"""What runs once a frame's answer is queued (``ctx.after``): every request's metrics,
even when another callback of the frame fails. Real server, real socket, real SQLite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from websockets.asyncio.client import connect

from session_server import ActorRegistry
from session_server.server import SessionServer
from session_server.server.fanout import Subscription


async def test_a_failing_callback_skips_no_other_request_s_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(self: Subscription) -> None:
        raise RuntimeError("a bug in go_live")

    monkeypatch.setattr(Subscription, "go_live", broken)
    registry = ActorRegistry(tmp_path, idle_timeout=None)
    async with registry, SessionServer(registry, port=0) as server:
        actor = await registry.get("a")
        sid = await actor.create_session()
        ops = registry.operations
        ok = {"method": "session.get", "code": "ok"}
        before = ops.value("requests_total", ok)
        async with connect(f"{server.url}/v1/agents/a") as ws:
            batch = [
                {"jsonrpc": "2.0", "id": 1, "method": "events.subscribe",
                 "params": {"session_id": sid}},
                {"jsonrpc": "2.0", "id": 2, "method": "session.get",
                 "params": {"session_id": sid}},
            ]  # fmt: skip
            await ws.send(json.dumps(batch))
            answers = json.loads(await ws.recv())
            assert [a["id"] for a in answers] == [1, 2]
            # The same frame's callbacks ran right after its answer was queued.
            assert ops.value("requests_total", ok) == before + 1
            subscribed = {"method": "events.subscribe", "code": "ok"}
            assert ops.value("requests_total", subscribed) == 1


async def test_an_answer_replaced_by_too_large_is_counted_as_that(tmp_path: Path) -> None:
    """The request's metrics report -32004 for an answer the shell replaced because it
    would pass ``max_answer_bytes`` (it used to count as ``ok``): a build whose context
    is too large, and the second of two loads in a batch (each fits alone)."""
    registry = ActorRegistry(tmp_path, idle_timeout=None)
    async with registry, SessionServer(registry, port=0, max_answer_bytes=20_000) as server:
        actor = await registry.get("a")
        one, two = await actor.create_session(), await actor.create_session()
        await actor.append_events(one, [{"content": "x" * 12_000}])
        await actor.append_events(two, [{"content": "x" * 12_000}] * 2)
        ops = registry.operations

        def count(method: str, code: str) -> float:
            return ops.value("requests_total", {"method": method, "code": code})

        def call(i: int, method: str, sid: str) -> dict[str, Any]:
            return {"jsonrpc": "2.0", "id": i, "method": method, "params": {"session_id": sid}}

        async with connect(f"{server.url}/v1/agents/a") as ws:
            await ws.send(json.dumps(call(1, "context.build", two)))
            assert json.loads(await ws.recv())["error"]["code"] == -32004
            assert (count("context.build", "-32004"), count("context.build", "ok")) == (1, 0)

            await ws.send(json.dumps([call(2, "events.load", one), call(3, "events.load", one)]))
            answers = json.loads(await ws.recv())
            assert "result" in answers[0] and answers[1]["error"]["code"] == -32004
            assert (count("events.load", "-32004"), count("events.load", "ok")) == (1, 1)

            # An invalid item (no method) whose error no longer fits: a session whose load
            # answer leaves 40 bytes of the 20,000 (the brackets and a comma aside).
            size = len(msgspec.json.encode(answers[0]))  # as the server encodes it
            three = await actor.create_session()
            await actor.append_events(three, [{"content": "x" * (12_000 + 20_000 - 43 - size)}])
            await ws.send(json.dumps([call(4, "events.load", three), {"jsonrpc": "2.0", "id": 5}]))
            answers = json.loads(await ws.recv())
            assert "result" in answers[0] and answers[1]["error"]["code"] == -32004
            assert (count("invalid", "-32004"), count("invalid", "-32600")) == (1, 0)
