"""Every method of the method table, called with every scope and with a token limited to
sessions, over a real server. Generated from ``BUILTIN_METHODS``: a new row is covered as
soon as it is in the table, and the table in docs/reference.md must list it with its scope."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from session_server.auth import SCOPES, Scope, mint_token, scope_allows
from session_server.rpc.method_spec import AGENT, SERVER, Endpoint, MethodSpec
from session_server.rpc.params import NoParams, SessionParams
from session_server.rpc.table import BUILTIN_METHODS as METHODS
from tests.support.server import RunningServer, running_server

ROOT = Path(__file__).resolve().parents[3]
SECRET = "scope-walk-secret-" + "x" * 32
FORBIDDEN = -32003


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "memory", secrets=[SECRET]) as running:
        yield running


def url_of(server: RunningServer, endpoint: Endpoint) -> str:
    return f"{server.url}/v1/agents/walker" if endpoint == AGENT else f"{server.url}/v1"


async def call(ws: ClientConnection, method: str, params: dict[str, Any]) -> dict[str, Any]:
    await ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
    while True:  # skip notifications (a subscription the walk itself started)
        answer = json.loads(await ws.recv())
        if answer.get("id") == 1:
            return dict(answer)


def refused(answer: dict[str, Any]) -> bool:
    return answer.get("error", {}).get("code") == FORBIDDEN


def test_every_method_names_a_scope() -> None:
    assert len(METHODS) >= 20
    for spec in METHODS.values():
        assert spec.scope in SCOPES, spec.name
        assert spec.sessions in ("param", "filter", "none", "deny"), spec.name

    async def handler(ctx: Any, p: Any) -> None:
        return None

    with pytest.raises(TypeError, match="scope"):
        MethodSpec("debug.unscoped", NoParams, handler)  # type: ignore[call-arg]
    # The session rule follows the params unless a row says otherwise.
    assert MethodSpec("d.a", SessionParams, handler, scope="read").sessions == "param"
    assert MethodSpec("d.b", NoParams, handler, scope="read").sessions == "deny"
    with pytest.raises(ValueError, match="needs a session_id"):
        MethodSpec("d.c", NoParams, handler, scope="read", sessions="param")


@pytest.mark.parametrize("scope", SCOPES)
async def test_every_method_with_every_scope(server: RunningServer, scope: Scope) -> None:
    """Params are empty: an allowed call fails validation or runs, never with -32003; a call
    beyond the scope is refused before its params are looked at."""
    token = mint_token(SECRET, agents=["*"], scope=scope, ttl=600)
    for endpoint in (AGENT, SERVER):
        headers = {"Authorization": f"Bearer {token}"}
        async with connect(url_of(server, endpoint), additional_headers=headers) as ws:
            for spec in METHODS.values():
                if spec.endpoint != endpoint:
                    continue
                answer = await call(ws, spec.name, {})
                allowed = scope_allows(scope, spec.scope)
                assert refused(answer) != allowed, (spec.name, scope, answer)
                if not allowed:
                    assert answer["error"]["data"] == {
                        "field": "token.scope",
                        "required": spec.scope,
                        "scope": scope,
                    }


async def test_every_method_with_a_session_limited_token(server: RunningServer) -> None:
    """An admin token limited to session "mine": methods addressing a session refuse any
    other (and a call naming none); only filtering and session-free methods run without
    one."""
    token = mint_token(SECRET, agents=["*"], sessions=["mine"], scope="admin", ttl=600)
    for endpoint in (AGENT, SERVER):
        headers = {"Authorization": f"Bearer {token}"}
        async with connect(url_of(server, endpoint), additional_headers=headers) as ws:
            for spec in METHODS.values():
                if spec.endpoint != endpoint:
                    continue
                if spec.sessions == "param":
                    assert refused(await call(ws, spec.name, {})), spec.name
                    assert refused(await call(ws, spec.name, {"session_id": "other"})), spec.name
                    assert not refused(await call(ws, spec.name, {"session_id": "mine"}))
                else:
                    answer = await call(ws, spec.name, {})
                    assert refused(answer) == (spec.sessions == "deny"), (spec.name, answer)


def documented_scopes() -> dict[str, str]:
    """The method -> scope table of docs/reference.md ("### Method scopes")."""
    text = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    section = text.split("### Method scopes", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| `([a-z_.]+)` \| `?(read|write|admin)`? \|", section, re.MULTILINE)
    return dict(rows)


def test_docs_table_lists_every_method_with_its_scope() -> None:
    assert documented_scopes() == {name: spec.scope for name, spec in METHODS.items()}
