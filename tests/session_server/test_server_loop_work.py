"""Work a single request of allowed size makes linear in its params runs off the event
loop, or is refused at the boundary (issue 13's standard: time on the event loop is
bounded; the stall figures are in BENCHMARKS.md, "Stalls").

Each test drives a real server on 127.0.0.1 and records, with the real function still
doing its work, which thread ran it: a large frame's parsing, range check and params
validation run on the registry's workers, a small frame's stay on the loop (a worker
round trip would cost more than they do).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from session_server import connection_pump
from session_server.client import SessionClient
from session_server.rpc import dispatch, params
from tests.support.server import running_server

WORKER_PREFIX = "session-server-sqlite"


def recording(
    monkeypatch: pytest.MonkeyPatch, module: Any, name: str, seen: dict[str, list[str]]
) -> None:
    """Wrap ``module.name`` (it still does its work) to record the threads it ran on."""
    original: Callable[..., Any] = getattr(module, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        seen.setdefault(name, []).append(threading.current_thread().name)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapped)


def on_workers(names: list[str]) -> bool:
    return bool(names) and all(n.startswith(WORKER_PREFIX) for n in names)


def on_loop(names: list[str]) -> bool:
    return bool(names) and all(n == "MainThread" for n in names)


async def test_a_large_frame_is_parsed_and_validated_on_a_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append of 20,000 small events (about 0.8 MB, over ``OFF_LOOP_FRAME_BYTES``):
    parsing, the integer range check and the events' validation ran on the event loop
    (a 16 MiB frame of small items held it 0.3 to 1.5 s); a small frame's stay there."""
    seen: dict[str, list[str]] = {}
    recording(monkeypatch, connection_pump, "parse_frame", seen)
    recording(monkeypatch, dispatch, "find_out_of_range_int", seen)
    recording(monkeypatch, params, "parse_client_events", seen)
    events = [{"action": "user_message", "content": f"q{i}"} for i in range(20_000)]
    async with (
        running_server(tmp_path / "memory") as server,
        SessionClient(server.url, "agent") as client,
    ):
        sid = await client.create_session()
        seen.clear()
        result = await client.call("events.append", {"session_id": sid, "events": events})
        assert result["last_seq"] == 20_000
        large = {name: list(threads) for name, threads in seen.items()}
        seen.clear()
        await client.append_events(sid, [{"content": "small"}])
    for name in ("parse_frame", "find_out_of_range_int", "parse_client_events"):
        assert on_workers(large[name]), (name, large)
        assert on_loop(seen[name]), (name, seen)


async def test_a_large_frame_that_does_not_parse_is_answered(tmp_path: Path) -> None:
    """A large frame parsed on a worker is refused as a small one is: -32700 for bad
    JSON; a binary frame that is not UTF-8 gets the same answer, the connection stays."""
    padding = b" " * connection_pump.OFF_LOOP_FRAME_BYTES
    async with (
        running_server(tmp_path / "memory") as server,
        connect(f"{server.url}/v1/agents/agent", max_size=None) as conn,
    ):
        await conn.send(b'{"jsonrpc": "2.0", "id": 1, "params": ' + padding, text=True)
        assert json.loads(await conn.recv())["error"]["code"] == -32700
        await conn.send(b"\xff" + padding)
        assert json.loads(await conn.recv())["error"]["code"] == -32700
        await conn.send(b'{"jsonrpc": "2.0", "id": 2, "method": "memory.get_strategy"}')
        assert json.loads(await conn.recv())["id"] == 2  # the connection still serves
