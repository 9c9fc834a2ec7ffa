"""What runs once a frame's answer is queued (``ctx.after``): every request's metrics,
even when another callback of the frame fails. Real server, real socket, real SQLite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from websockets.asyncio.client import connect

from session_server import ActorRegistry
from session_server.fanout import Subscription
from session_server.server import SessionServer


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
