"""``session.list`` is bounded (issue 13, item 8): without params it answers one page of
``DEFAULT_PAGE`` sessions, with ``total``, ``next_offset`` and an opaque ``next_cursor``
that resumes after the last session shown. Real server, real sockets."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from session_server.client import SessionClient
from session_server.rpc.session_methods import DEFAULT_PAGE
from tests.support.server import RunningServer, running_server

AGENT = "pages"
COUNT = DEFAULT_PAGE * 2 + 30


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "memory", synchronous="NORMAL") as running:
        async with SessionClient(running.url, AGENT) as client:
            for n in range(COUNT):
                await client.create_session(session_id=f"s{n:04}")
        yield running


async def ask(ws: ClientConnection, params: dict[str, Any] | None = None) -> dict[str, Any]:
    frame: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": "session.list"}
    if params is not None:
        frame["params"] = params
    await ws.send(json.dumps(frame))
    answer: dict[str, Any] = json.loads(await ws.recv())
    return answer


async def test_without_params_one_page_and_a_cursor_to_the_rest(server: RunningServer) -> None:
    async with connect(f"{server.url}/v1/agents/{AGENT}") as ws:
        first = (await ask(ws))["result"]
        assert len(first["sessions"]) == DEFAULT_PAGE
        assert first["total"] == COUNT and first["next_offset"] == DEFAULT_PAGE
        seen = [s["id"] for s in first["sessions"]]
        # A session created between pages shifts nothing after the cursor.
        async with SessionClient(server.url, AGENT) as client:
            await client.create_session(session_id="late")
        cursor = first["next_cursor"]
        pages = 1
        while cursor is not None:
            page = (await ask(ws, {"cursor": cursor}))["result"]
            assert page["next_offset"] is None  # offsets are for offset paging
            seen += [s["id"] for s in page["sessions"]]
            cursor = page["next_cursor"]
            pages += 1
        assert pages == 3
        assert len(seen) == len(set(seen)) == COUNT and "late" not in seen

        last = (await ask(ws, {"limit": 30, "offset": COUNT - 29}))["result"]
        assert len(last["sessions"]) == 30  # "late" moved everything by one
        assert last["next_offset"] is None and last["next_cursor"] is None


async def test_bad_cursors_are_refused_naming_the_field(server: RunningServer) -> None:
    async with connect(f"{server.url}/v1/agents/{AGENT}") as ws:
        for params in ({"cursor": "not-a-cursor"}, {"cursor": "W10", "offset": 0}):
            error = (await ask(ws, params))["error"]
            assert error["code"] == -32602 and error["data"] == {"field": "cursor"}
        first = (await ask(ws, {"limit": 5}))["result"]
        both = await ask(ws, {"cursor": first["next_cursor"], "offset": 5})
        assert both["error"]["data"] == {"field": "cursor"}
        too_big = await ask(ws, {"limit": 5000})
        assert too_big["error"]["code"] == -32602
        # A forged cursor whose numbers do not fit SQLite's integers is refused, not -32603.
        for forged in ([2**70, 0, "x"], [0, -(2**64), "x"]):
            raw = base64.urlsafe_b64encode(json.dumps(forged).encode()).decode().rstrip("=")
            error = (await ask(ws, {"cursor": raw}))["error"]
            assert error["code"] == -32602 and error["data"] == {"field": "cursor"}, error


async def test_the_client_still_lists_every_session(server: RunningServer) -> None:
    async with SessionClient(server.url, AGENT) as client:
        assert len(await client.list_sessions()) == COUNT
        assert len([s async for s in client.iter_sessions(page_size=64)]) == COUNT
        page = await client.session_page()
        assert len(page.sessions) == DEFAULT_PAGE and page.next_cursor is not None
