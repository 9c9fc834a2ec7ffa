"""Handshake refusals: 401 without a valid token, 403 for an agent the token may not
address, 400 for an invalid agent id, 404 for an unknown path — before any actor exists."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus
from websockets.typing import Subprotocol

from session_server.client import SessionClient
from session_server.values.errors import NotFoundError
from tests.support.server import RunningServer, running_server

TOKENS = ("admin-token", "team-token:team-a-*,helper")


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "memory", tokens=TOKENS) as running:
        yield running


async def status_of(url: str, **kwargs: Any) -> int:
    with pytest.raises(InvalidStatus) as info:
        async with connect(url, **kwargs):
            pass
    return info.value.response.status_code


def bearer(token: str) -> dict[str, Any]:
    return {"additional_headers": {"Authorization": f"Bearer {token}"}}


async def test_missing_or_wrong_token_is_401(server: RunningServer) -> None:
    url = f"{server.url}/v1/agents/team-a-1"
    assert await status_of(url) == 401
    assert await status_of(url, **bearer("nope")) == 401
    assert await status_of(url, additional_headers={"Authorization": "Basic admin-token"}) == 401
    assert await status_of(url, subprotocols=[Subprotocol("bearer.wrong")]) == 401
    assert await status_of(f"{server.url}/v1") == 401
    assert not (server.registry.memory_dir / "agents").exists()


async def test_token_limited_to_patterns_is_403_elsewhere(server: RunningServer) -> None:
    assert await status_of(f"{server.url}/v1/agents/team-b-1", **bearer("team-token")) == 403
    assert await status_of(f"{server.url}/v1/agents/helper2", **bearer("team-token")) == 403
    assert not (server.registry.memory_dir / "agents").exists()
    async with SessionClient(server.url, "team-a-1", token="team-token") as client:
        with pytest.raises(NotFoundError):  # allowed; a read creates no agent
            await client.list_sessions()
        await client.create_session()
    async with SessionClient(server.url, "helper", token="team-token") as client:
        await client.create_session()
    async with SessionClient(server.url, "other", token="admin-token") as client:
        await client.create_session()
    async with SessionClient(server.url, None, token="team-token") as client:
        assert await client.list_agents() == ["helper", "team-a-1"]
    async with SessionClient(server.url, None, token="admin-token") as client:
        assert await client.list_agents() == ["helper", "other", "team-a-1"]


async def test_browser_subprotocol_token(server: RunningServer) -> None:
    url = f"{server.url}/v1/agents/team-a-2"
    offered = [Subprotocol("jsonrpc"), Subprotocol("bearer.team-token")]
    async with connect(url, subprotocols=offered) as ws:
        assert ws.subprotocol == "jsonrpc"
        await ws.send('{"jsonrpc":"2.0","id":1,"method":"session.create"}')
        assert "session_id" in json.loads(await ws.recv())["result"]
    async with connect(url, subprotocols=[Subprotocol("bearer.admin-token")]) as ws:
        assert ws.subprotocol == "bearer.admin-token"


@pytest.mark.parametrize(
    "agent_path",
    [
        quote("../escape", safe=""),
        "..",
        quote("a/b", safe=""),
        "a%00b",
        "x" * 129,
        quote(" padded", safe=""),
        "%FF%FE",
        "",
    ],
)
async def test_invalid_agent_id_is_400(server: RunningServer, agent_path: str) -> None:
    url = f"{server.url}/v1/agents/{agent_path}"
    assert await status_of(url, **bearer("admin-token")) == 400
    assert not (server.registry.memory_dir / "agents").exists()


async def test_unknown_path_is_404(server: RunningServer) -> None:
    assert await status_of(f"{server.url}/v2/agents/a", **bearer("admin-token")) == 404
    assert await status_of(f"{server.url}/", **bearer("admin-token")) == 404


async def test_no_tokens_means_open(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path / "memory") as running,
        SessionClient(running.url, "anyone", token="ignored") as client,
    ):
        await client.create_session(session_id="s")
        assert [s["id"] for s in await client.list_sessions()] == ["s"]
