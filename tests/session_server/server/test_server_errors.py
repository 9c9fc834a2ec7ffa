"""Bad input gets a JSON-RPC error (or a 1009 close for oversized frames) and never
disturbs the connection or other clients; a refused request writes nothing."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from session_server.rpc.method_spec import CallContext, MethodSpec, method_table
from session_server.rpc.params import NoParams
from session_server.rpc.table import ROWS
from tests.support.server import EMPTY_PAGE, RunningServer, make_agents, running_server


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(
        tmp_path / "memory", max_frame_bytes=64 * 1024, methods=METHODS
    ) as running:
        await make_agents(running.registry, "err-agent", "bystander")
        yield running


@pytest.fixture
async def ws(server: RunningServer) -> AsyncIterator[ClientConnection]:
    async with connect(f"{server.url}/v1/agents/err-agent", max_size=None) as conn:
        yield conn


async def ask(ws: ClientConnection, frame: str | bytes) -> Any:
    await ws.send(frame)
    return json.loads(await ws.recv())


async def create(ws: ClientConnection) -> str:
    answer = await ask(ws, '{"jsonrpc":"2.0","id":0,"method":"session.create"}')
    return str(answer["result"]["session_id"])


async def event_count(ws: ClientConnection, sid: str) -> int:
    frame = json.dumps(
        {"jsonrpc": "2.0", "id": 99, "method": "events.load", "params": {"session_id": sid}}
    )
    return len((await ask(ws, frame))["result"]["events"])


async def test_parse_errors_keep_the_connection(ws: ClientConnection) -> None:
    answer = await ask(ws, "{oops")
    assert answer["id"] is None
    assert answer["error"]["code"] == -32700
    answer = await ask(ws, b"\xc3\x28")  # binary frame, invalid UTF-8
    assert answer["error"]["code"] == -32700
    assert "UTF-8" in answer["error"]["message"]
    answer = await ask(ws, b'{"jsonrpc":"2.0","id":5,"method":"session.list"}')  # binary, valid
    assert answer == {"jsonrpc": "2.0", "id": 5, "result": EMPTY_PAGE}


@pytest.mark.parametrize(
    ("frame", "code", "needle"),
    [
        ('{"jsonrpc":"2.0","id":1}', -32600, "method is missing"),
        ('{"id":1,"method":"session.list"}', -32600, "jsonrpc"),
        ("[]", -32600, "empty batch"),
        ("42", -32600, "expected a JSON object"),
        ('{"jsonrpc":"2.0","id":1,"method":"no.such"}', -32601, "'no.such'"),
        ('{"jsonrpc":"2.0","id":1,"method":"session.get","params":["s"]}', -32602, "params"),
        (
            '{"jsonrpc":"2.0","id":1,"method":"session.get","params":{}}',
            -32602,
            "params.session_id",
        ),
        (
            '{"jsonrpc":"2.0","id":1,"method":"events.load","params":{"session_id":"s","limit":"5"}}',
            -32602,
            "params.limit: Input should be a valid integer",
        ),
        (
            '{"jsonrpc":"2.0","id":1,"method":"events.load","params":{"session_id":"s","bogus":1}}',
            -32602,
            "params.bogus",
        ),
        (
            '{"jsonrpc":"2.0","id":1,"method":"context.build","params":{"session_id":"s","system_instructions":3}}',
            -32602,
            "params.system_instructions",
        ),
        (
            '{"jsonrpc":"2.0","id":1,"method":"turn.persist","params":{"session_id":"s","messages":[{"role":"robot"}]}}',
            -32602,
            "params.messages[0].role",
        ),
    ],
)
async def test_envelope_and_param_errors(
    ws: ClientConnection, frame: str, code: int, needle: str
) -> None:
    answer = await ask(ws, frame)
    assert answer["error"]["code"] == code
    assert needle in answer["error"]["message"]
    assert (await ask(ws, '{"jsonrpc":"2.0","id":2,"method":"session.list"}'))["id"] == 2


async def test_invalid_event_names_field_and_writes_nothing(ws: ClientConnection) -> None:
    sid = await create(ws)
    frame = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "events.append",
            "params": {
                "session_id": sid,
                "events": [{"content": "fine"}, {"content": 5}],
            },
        }
    )
    answer = await ask(ws, frame)
    assert answer["error"]["code"] == -32602
    assert answer["error"]["message"].startswith("params.events[1].content:")
    assert answer["error"]["data"]["field"] == "params.events[1].content"
    tool = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "turn.persist",
            "params": {
                "session_id": sid,
                "messages": [{"role": "user", "content": "q"}, {"role": "tool", "content": "r"}],
            },
        }
    )
    answer = await ask(ws, tool)
    assert answer["error"]["code"] == -32602
    assert "params.messages[1].tool_call_id" in answer["error"]["message"]
    assert await event_count(ws, sid) == 0


async def test_not_found_and_conflict_codes(ws: ClientConnection) -> None:
    answer = await ask(
        ws,
        '{"jsonrpc":"2.0","id":1,"method":"events.append",'
        '"params":{"session_id":"ghost","events":[{"content":"x"}]}}',
    )
    assert answer["error"]["code"] == -32001
    assert "ghost" in answer["error"]["message"]
    sid = await create(ws)
    frame = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "events.append",
            "params": {"session_id": sid, "events": [{"content": "x"}], "expected_last_seq": 3},
        }
    )
    answer = await ask(ws, frame)
    assert answer["error"]["code"] == -32002
    assert answer["error"]["data"]["last_seq"] == 0
    assert await event_count(ws, sid) == 0


async def test_notifications_get_no_answer(ws: ClientConnection) -> None:
    await ws.send('{"jsonrpc":"2.0","method":"session.create"}')
    await ws.send('{"jsonrpc":"2.0","method":"no.such"}')
    await ws.send('{"jsonrpc":"2.0","method":"session.get","params":7}')
    # Frames are handled concurrently, so wait for the created session rather than on order.
    answer = await ask(ws, '{"jsonrpc":"2.0","id":"last","method":"session.list"}')
    assert answer["id"] == "last"
    while not answer["result"]["sessions"]:
        answer = await ask(ws, '{"jsonrpc":"2.0","id":"again","method":"session.list"}')
        assert answer["id"] == "again"


async def explode(ctx: CallContext, p: NoParams) -> None:
    raise RuntimeError("secret internal detail")


# The server under test answers the built-in table plus one method that fails.
METHODS = method_table(ROWS, [MethodSpec("test.explode", NoParams, explode, scope="read")])


@pytest.fixture
def exploding_method() -> str:
    return "test.explode"


async def test_unexpected_exception_is_generic_and_logged(
    ws: ClientConnection, exploding_method: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="session_server.rpc"):
        answer = await ask(ws, json.dumps({"jsonrpc": "2.0", "id": 1, "method": exploding_method}))
    assert answer["error"] == {"code": -32603, "message": "Internal error"}
    assert "secret internal detail" in caplog.text
    assert (await ask(ws, '{"jsonrpc":"2.0","id":2,"method":"session.list"}'))["id"] == 2


async def test_oversized_frame_closes_with_1009_and_spares_others(
    server: RunningServer, ws: ClientConnection
) -> None:
    async with connect(f"{server.url}/v1/agents/bystander") as other:
        big = json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "session.create",
                "params": {"metadata": {"blob": "x" * (64 * 1024)}},
            }
        )
        await ws.send(big)
        with pytest.raises(ConnectionClosed) as info:
            await ws.recv()
        assert info.value.rcvd is not None and info.value.rcvd.code == 1009
        answer = await ask(other, '{"jsonrpc":"2.0","id":3,"method":"session.list"}')
        assert answer == {"jsonrpc": "2.0", "id": 3, "result": EMPTY_PAGE}
    async with connect(f"{server.url}/v1/agents/err-agent") as again:
        answer = await ask(again, '{"jsonrpc":"2.0","id":4,"method":"session.list"}')
        assert answer["result"] == EMPTY_PAGE


def _call(method: str, params: dict[str, Any], rid: int = 1) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})


async def test_tool_arguments_nested_too_deep_are_refused_naming_the_field(
    ws: ClientConnection,
) -> None:
    sid = await create(ws)
    deep_text = "[" * 30_000 + "]" * 30_000  # the frame bound here is 64 KiB
    messages = [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c1", "name": "f", "arguments": deep_text}],
        },
        {"role": "tool", "content": "r", "tool_call_id": "c1"},
    ]
    answer = await ask(ws, _call("turn.persist", {"session_id": sid, "messages": messages}))
    assert answer["error"]["code"] == -32602, answer
    assert answer["error"]["data"]["field"] == "params.messages[1].tool_calls[0].arguments"
    # Nested values in params: the first one too deep is named, whatever the method.
    nested: Any = 1
    for _ in range(150):
        nested = {"a": nested}
    messages = [{"role": "user", "content": "q", "metadata": nested}]
    answer = await ask(ws, _call("turn.persist", {"session_id": sid, "messages": messages}))
    assert answer["error"]["code"] == -32602, answer
    field = answer["error"]["data"]["field"]
    assert field.startswith("params.messages[0].metadata.a.a")
    assert field.count(".a") == 97  # params (1), messages (2), [0] (3), metadata (4) ...
    assert await event_count(ws, sid) == 0
    # Within the bound it is stored, and every adapter renders it.
    shallow = "[" * 60 + "]" * 60
    messages[0]["metadata"] = {"a": [[[[1]]]]}
    messages.append(
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "c2", "name": "f", "arguments": shallow}],
        }
    )
    answer = await ask(ws, _call("turn.persist", {"session_id": sid, "messages": messages}))
    assert "result" in answer, answer
    for adapter in ("anthropic", "openai-chat", "openai-responses", "workers-ai"):
        rendered = await ask(ws, _call("context.render", {"session_id": sid, "adapter": adapter}))
        assert "result" in rendered, rendered


async def test_timestamps_out_of_range_are_refused(ws: ClientConnection) -> None:
    sid = await create(ws)
    for stamp in (10**18, -5, 253_402_300_800_000):
        event = {"action": "user_message", "content": "x", "timestamp": stamp}
        answer = await ask(ws, _call("events.append", {"session_id": sid, "events": [event]}))
        assert answer["error"]["code"] == -32602, answer
        assert answer["error"]["data"]["field"] == "params.events[0].timestamp"
    event = {"action": "user_message", "content": "x", "timestamp": 253_402_300_799_999}
    answer = await ask(ws, _call("events.append", {"session_id": sid, "events": [event]}))
    assert answer["result"]["seqs"] == [1]


@pytest.mark.parametrize(
    ("files", "field"),
    [
        (
            {"raw_traces.jsonl": '{"id":"x","ts":1e30,"turn_id":"turn_0001","seq":1,'
             '"trace_type":"user","content":"hi","source_event":{}}\n'},
            "raw_traces.jsonl:1.ts",
        ),
        (
            {
                "raw_traces.jsonl": '{"id":"x","ts":1,"turn_id":"turn_0001","seq":1,'
                '"trace_type":"user","content":"hi","source_event":{}}\n',
                "episodic.jsonl": '{"id":"e","ts":1e30,"turn_ids":[],"summary":"s"}\n',
            },
            "episodic.jsonl.ts",
        ),
    ],
)  # fmt: skip
async def test_an_import_with_times_out_of_range_is_refused(
    ws: ClientConnection, files: dict[str, str], field: str
) -> None:
    answer = await ask(ws, _call("import.session", {"files": files}))
    assert answer["error"]["code"] == -32602, answer
    assert answer["error"]["data"]["field"] == field
    listed = await ask(ws, _call("session.list", {}))
    assert listed["result"]["total"] == 0
