"""Work a single request of allowed size makes linear in its params runs off the event
loop, or is refused at the boundary (issue 13's standard: time on the event loop is
bounded; the stall figures are in BENCHMARKS.md, "Stalls").

Each test drives a real server on 127.0.0.1 and records, with the real function still
doing its work, which thread ran it: a large frame's parsing, range check and params
validation run on the registry's workers, a small frame's stay on the loop (a worker
round trip would cost more than they do).
"""

from __future__ import annotations

import base64
import json
import threading
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from session_server.adapters.anthropic import AnthropicAdapter
from session_server.client import SessionClient
from session_server.rpc import dispatch, memory_methods, params, session_methods
from session_server.server import connection_pump
from session_server.values.errors import SessionServerError
from tests.session_server.runtime.test_off_loop import on_workers, recording
from tests.support.server import running_server


def on_loop(names: list[str]) -> bool:
    return bool(names) and all(n == "MainThread" for n in names)


async def test_a_large_frame_is_parsed_and_validated_on_a_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An append of 10,000 small events (about 0.4 MB, over ``OFF_LOOP_FRAME_BYTES``):
    parsing, the integer range check and the events' validation ran on the event loop
    (a 16 MiB frame of small items held it 0.3 to 1.5 s); a small frame's stay there."""
    seen: dict[str, list[str]] = {}
    recording(monkeypatch, connection_pump, "parse_frame", seen)
    recording(monkeypatch, dispatch, "find_out_of_range_int", seen)
    recording(monkeypatch, params, "parse_client_events", seen)
    # 19 digits in a row make the integer range check run (see the frame without them).
    digits = "1" * 19
    events = [{"action": "user_message", "content": f"q{i}"} for i in range(params.MAX_WRITE_ITEMS)]
    events[0]["content"] = digits
    async with (
        running_server(tmp_path / "memory") as server,
        SessionClient(server.url, "agent") as client,
    ):
        sid = await client.create_session()
        seen.clear()
        result = await client.call("events.append", {"session_id": sid, "events": events})
        assert result["last_seq"] == params.MAX_WRITE_ITEMS
        large = {name: list(threads) for name, threads in seen.items()}
        seen.clear()
        await client.append_events(sid, [{"content": f"small {digits}"}])
        small = {name: list(threads) for name, threads in seen.items()}
        seen.clear()
        await client.append_events(sid, [{"content": "small, no long number"}])
    for name in ("parse_frame", "find_out_of_range_int", "parse_client_events"):
        assert on_workers(large[name]), (name, large)
        assert on_loop(small[name]), (name, small)
    # No 19 digits in a row in the frame: no integer can be out of range, no walk.
    assert "find_out_of_range_int" not in seen and on_loop(seen["parse_frame"]), seen


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


async def test_a_long_context_is_rendered_on_a_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``context.render`` of more than ``RENDER_ON_LOOP_ITEMS`` messages renders on a
    worker (100k messages held the loop 430 ms); a short one on the loop."""
    seen: dict[str, list[str]] = {}
    recording(monkeypatch, AnthropicAdapter, "to_model_messages", seen)
    many = memory_methods.RENDER_ON_LOOP_ITEMS + 1
    async with (
        running_server(tmp_path / "memory") as server,
        SessionClient(server.url, "agent") as client,
    ):
        sid = await client.create_session()
        await client.append_events(sid, [{"content": f"q{i}"} for i in range(many)])
        render = {"session_id": sid, "adapter": "anthropic", "limit": many}
        long = await client.call("context.render", render)
        assert len(long["payload"]["messages"]) == 1  # consecutive user turns merge
        short = await client.call("context.render", {**render, "limit": 2})
        assert long["payload"]["messages"][0]["content"][-1] == {
            "type": "text",
            "text": f"q{many - 1}",
        }
        assert short["payload"]["messages"]
    assert on_workers(seen["to_model_messages"][:1]), seen
    assert on_loop(seen["to_model_messages"][1:]), seen


def field_of(error: SessionServerError) -> Any:
    return (error.data or {}).get("field")


async def refusal(client: SessionClient, method: str, params: dict[str, Any]) -> SessionServerError:
    with pytest.raises(SessionServerError) as caught:
        await client.call(method, params)
    return caught.value


async def test_lists_a_request_may_give_are_bounded(tmp_path: Path) -> None:
    """Refused at the boundary, naming the field: more than ``MAX_WRITE_ITEMS`` events
    or messages in one write (100k held the loop 250 to 450 ms in the commit's
    bookkeeping), a ``session.list`` filter of more than
    ``MAX_FILTER_KEYS`` keys (an internal error, "Expression tree is too large", before),
    an ``events.delete`` of more than ``MAX_EVENT_IDS`` ids ("too many SQL variables"),
    more than ``MAX_INSTRUCTIONS`` system instructions (1.5M held the loop 1.9 s). An
    ``events.load`` with many repeated actions binds each action once (it failed with
    "too many SQL variables"); an import of many unknown files names a few of them (the
    refusal listed all 500k: an 8 MB error)."""
    async with (
        running_server(tmp_path / "memory") as server,
        SessionClient(server.url, "agent") as client,
    ):
        sid = await client.create_session(metadata={"k0": 0})
        await client.append_events(
            sid, [{"content": "q"}, {"content": "a", "action": "agent_message"}]
        )
        keys = {f"k{i}": i for i in range(session_methods.MAX_FILTER_KEYS)}
        page = await client.call("session.list", {"metadata": keys})
        assert page["sessions"] == []
        error = await refusal(client, "session.list", {"metadata": {**keys, "one more": 1}})
        assert error.code == -32602 and field_of(error) == "params.metadata", error
        ids = [f"e{i}" for i in range(params.MAX_EVENT_IDS)]
        assert await client.call("events.delete", {"session_id": sid, "event_ids": ids}) == {
            "deleted": 0
        }
        error = await refusal(
            client, "events.delete", {"session_id": sid, "event_ids": [*ids, "one more"]}
        )
        assert error.code == -32602 and field_of(error) == "params.event_ids", error
        texts = ["be brief"] * params.MAX_INSTRUCTIONS
        built = await client.call(
            "context.build", {"session_id": sid, "system_instructions": texts}
        )
        assert len(built["system_instructions"]) == params.MAX_INSTRUCTIONS
        for method in ("context.build", "context.render", "memory.compact"):
            error = await refusal(
                client,
                method,
                {"session_id": sid, "adapter": "anthropic", "system_instructions": [*texts, "x"]}
                if method == "context.render"
                else {"session_id": sid, "system_instructions": [*texts, "x"]},
            )
            assert error.code == -32602, error
            assert field_of(error) == "params.system_instructions", error
        for method, name in (("events.append", "events"), ("turn.persist", "messages")):
            items = [{"role": "user", "content": "x"}] * (params.MAX_WRITE_ITEMS + 1)
            error = await refusal(client, method, {"session_id": sid, name: items})
            assert error.code == -32602 and field_of(error) == f"params.{name}", error
        loaded = await client.call(
            "events.load", {"session_id": sid, "actions": ["agent_message"] * 100_000}
        )
        assert [e["content"] for e in loaded["events"]] == ["a"]
        files = {f"f{i}.jsonl": "" for i in range(100_000)}
        error = await refusal(client, "import.session", {"files": files})
        assert error.code == -32602 and field_of(error) == "files", error
        assert "and 99995 more" in str(error) and len(str(error)) < 1000, str(error)


async def test_session_metadata_is_bounded(tmp_path: Path) -> None:
    """``session.create`` and ``session.update`` refuse metadata of more than
    ``MAX_SESSION_METADATA_BYTES`` of JSON, naming ``params.metadata``; at the bound it
    is kept and answered whole."""
    limit = params.MAX_SESSION_METADATA_BYTES
    fits = {"notes": "n" * (limit - len('{"notes":""}'))}
    over = {"notes": fits["notes"] + "n"}
    async with (
        running_server(tmp_path / "memory") as server,
        SessionClient(server.url, "agent") as client,
    ):
        sid = await client.create_session(metadata=fits)
        assert (await client.get_session(sid))["metadata"] == fits
        error = await refusal(client, "session.create", {"metadata": over})
        assert error.code == -32602 and field_of(error) == "params.metadata", error
        error = await refusal(client, "session.update", {"session_id": sid, "metadata": over})
        assert error.code == -32602 and field_of(error) == "params.metadata", error
        updated = await client.call("session.update", {"session_id": sid, "metadata": fits})
        assert updated["metadata"] == fits


async def test_a_restore_decodes_its_base64_on_a_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``agent.restore`` decodes ``data`` (up to 16 MiB of base64) on a worker, not on the
    event loop (about 50 ms there); bad base64 is refused naming ``data``."""
    seen: list[str] = []
    original = base64.b64decode

    def b64decode(data: Any, *args: Any, **kwargs: Any) -> bytes:
        if len(data) > 1000:  # the backup's (the websockets handshake decodes a key too)
            seen.append(threading.current_thread().name)
        return original(data, *args, **kwargs)

    monkeypatch.setattr(base64, "b64decode", b64decode)
    async with (
        running_server(tmp_path / "memory") as server,
        SessionClient(server.url, "agent") as client,
    ):
        await client.create_session()
        backup = await client.call("agent.backup", {})
        restored = await client.call(
            "agent.restore", {"data": backup["data"], "sha256": backup["sha256"], "force": True}
        )
        assert restored["sessions"] == 1, restored
        error = await refusal(
            client, "agent.restore", {"data": "not base64!", "sha256": "0" * 64, "force": True}
        )
        assert error.code == -32602 and field_of(error) == "data", error
    assert on_workers(seen), seen
