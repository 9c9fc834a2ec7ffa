"""Signed, scoped, expiring tokens over real handshakes: every refusal at the handshake,
a session-scoped read token in a browser-style client, a read-scoped build that writes no
compaction record, expiry on an open connection, and rotation of an in-process server."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jwt
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus
from websockets.typing import Subprotocol

from session_server.auth import Authenticator, mint_token, parse_token_specs
from session_server.client import SessionClient
from session_server.values.errors import NotFoundError
from tests.support.server import (
    EMPTY_PAGE,
    RunningServer,
    make_agents,
    running_server,
    turn_messages,
)

SECRET = "test-secret-" + "s" * 32
OTHER_SECRET = "other-secret-" + "o" * 32
AGENT = "support-bot"
ADMIN = "admin-token"
STATIC = (ADMIN, "reader:support-*:read", "writer:support-*:write")


class Clock:
    """The server's clock, moved by the test (token expiry without waiting)."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def server(tmp_path: Path, clock: Clock) -> AsyncIterator[RunningServer]:
    async with running_server(
        tmp_path / "memory", tokens=STATIC, secrets=[SECRET], clock=clock
    ) as running:
        await make_agents(running.registry, AGENT)
        yield running


def agent_url(server: RunningServer, agent: str = AGENT) -> str:
    return f"{server.url}/v1/agents/{quote(agent, safe='')}"


def signed(clock: Clock, **claims: Any) -> str:
    args: dict[str, Any] = {"agents": [AGENT], "scope": "read", "ttl": 600, "now": clock.now}
    return mint_token(SECRET, **{**args, **claims})


def bearer(token: str) -> dict[str, Any]:
    return {"additional_headers": {"Authorization": f"Bearer {token}"}}


async def refusal(url: str, **kwargs: Any) -> tuple[int, str, str]:
    with pytest.raises(InvalidStatus) as info:
        async with connect(url, **kwargs):
            pass
    response = info.value.response
    return response.status_code, response.body.decode(), response.headers["WWW-Authenticate"]


class Browser:
    """What a page's ``new WebSocket(url, ["jsonrpc", "bearer." + token])`` does: the token
    travels as a subprotocol; answers are matched by id, notifications kept aside."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.next_id = 0
        self.notifications: list[dict[str, Any]] = []

    async def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self.next_id += 1
        await self.ws.send(
            json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        )
        while True:
            message = json.loads(await asyncio.wait_for(self.ws.recv(), 10))
            if message.get("id") == self.next_id:
                return dict(message)
            self.notifications.append(message)

    async def result(self, method: str, params: dict[str, Any] | None = None) -> Any:
        answer = await self.call(method, params)
        assert "result" in answer, answer
        return answer["result"]

    async def refused(self, method: str, params: dict[str, Any] | None = None) -> str:
        answer = await self.call(method, params)
        assert answer.get("error", {}).get("code") == -32003, (method, params, answer)
        return str(answer["error"]["message"])

    async def notification(self) -> dict[str, Any]:
        if not self.notifications:
            self.notifications.append(json.loads(await asyncio.wait_for(self.ws.recv(), 10)))
        return self.notifications.pop(0)


def browser_protocols(token: str) -> list[Subprotocol]:
    return [Subprotocol("jsonrpc"), Subprotocol(f"bearer.{token}")]


# ------------------------------------------------------------------ refusals at the handshake


def tamper(token: str, **changes: Any) -> str:
    """The same signature over a payload with ``changes``: what an attacker would try."""
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    body = json.dumps({**claims, **changes}).encode()
    return f"{header}.{base64.urlsafe_b64encode(body).rstrip(b'=').decode()}.{signature}"


async def test_each_bad_token_is_refused_with_401_and_a_reason(
    server: RunningServer, clock: Clock
) -> None:
    url = agent_url(server)
    good = signed(clock)
    cases = {
        "missing": (None, "a token is required"),
        "unknown": ("no-such-token", "unknown token"),
        "expired": (signed(clock, now=clock.now - 700), "token expired"),
        "tampered": (tamper(good, scope="admin", agents=["*"]), "token signature does not verify"),
        "wrong secret": (
            mint_token(OTHER_SECRET, agents=[AGENT], scope="read", ttl=600),
            "token signature does not verify",
        ),
        "unsigned": (
            jwt.encode({"agents": [AGENT], "scope": "admin", "exp": 2**40}, None, algorithm="none"),
            "token is not signed with HS256",
        ),
        "malformed": ("bm90.anNvbg.c2ln", "malformed token"),
        "bad claims": (
            jwt.encode({"agents": [AGENT], "scope": "root", "exp": 2**40}, SECRET),
            "token claims invalid: scope: must be one of read, write, admin",
        ),
    }
    for name, (token, reason) in cases.items():
        kwargs = bearer(token) if token else {}
        status, body, challenge = await refusal(url, **kwargs)
        assert status == 401, name
        assert body.startswith(f"401 Unauthorized: {reason}"), name
        assert 'error="invalid_token"' in challenge
        assert SECRET not in body and (token is None or token not in body)
        # The browser way of presenting the same token is refused alike.
        if token:
            status, body, _ = await refusal(url, subprotocols=browser_protocols(token))
            assert status == 401 and body.startswith(f"401 Unauthorized: {reason}"), name
    assert server.registry.list_agents() == [AGENT]  # the fixture's; refusals made none


async def test_a_signed_token_for_other_agents_is_403(server: RunningServer, clock: Clock) -> None:
    token = signed(clock, agents=["support-*"])
    status, body = 0, ""
    with pytest.raises(InvalidStatus) as info:
        async with connect(agent_url(server, "billing-bot"), **bearer(token)):
            pass
    status, body = info.value.response.status_code, info.value.response.body.decode()
    assert status == 403 and "may not address this agent" in body
    async with SessionClient(server.url, "support-2", token=token) as client:
        with pytest.raises(NotFoundError):  # allowed, but reads create no agent
            await client.list_sessions()


async def test_metrics_need_an_admin_token(server: RunningServer, clock: Clock) -> None:
    for token in (signed(clock), "writer"):
        with pytest.raises(InvalidStatus) as info:
            async with connect(f"{server.url}/metrics", **bearer(token)):
                pass
        assert info.value.response.status_code == 403


async def test_metrics_are_refused_to_an_admin_token_limited_to_sessions(
    server: RunningServer, clock: Clock
) -> None:
    limited = signed(clock, scope="admin", sessions=["mine"])
    with pytest.raises(InvalidStatus) as info:
        async with connect(f"{server.url}/metrics", **bearer(limited)):
            pass
    response = info.value.response
    assert response.status_code == 403
    assert b"not available to a token limited to sessions" in response.body
    # The same admin token without a session limit reads them.
    host, port = server.url.removeprefix("ws://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    admin = signed(clock, scope="admin")
    writer.write(
        f"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {admin}\r\n"
        "Connection: close\r\n\r\n".encode()
    )
    body = (await reader.read()).decode()
    writer.close()
    assert body.startswith("HTTP/1.1 200")


# ------------------------------------------------------------------ a browser with a session token


async def two_sessions(server: RunningServer) -> tuple[str, str]:
    async with SessionClient(server.url, AGENT, token=ADMIN) as admin:
        mine = await admin.create_session(metadata={"user": "u1"})
        other = await admin.create_session(metadata={"user": "u2"})
        for sid in (mine, other):
            await admin.persist_turn(sid, turn_messages(1))
    async with SessionClient(server.url, "billing-bot", token=ADMIN) as admin:
        await admin.create_session()
    return mine, other


async def test_session_read_token_in_a_browser_reads_its_session_and_nothing_else(
    server: RunningServer, clock: Clock
) -> None:
    mine, other = await two_sessions(server)
    token = signed(clock, sessions=[mine], scope="read")
    async with connect(agent_url(server), subprotocols=browser_protocols(token)) as ws:
        assert ws.subprotocol == "jsonrpc"  # the token is not echoed back
        page = Browser(ws)
        # Its own session: every read works.
        listed = await page.result("session.list")
        assert [s["id"] for s in listed["sessions"]] == [mine]
        assert (await page.result("session.get", {"session_id": mine}))["metadata"] == {
            "user": "u1"
        }
        loaded = await page.result("events.load", {"session_id": mine})
        assert len(loaded["events"]) == 4
        built = await page.result("context.build", {"session_id": mine})
        assert [m["role"] for m in built["messages"]] == ["user", "assistant", "tool", "assistant"]
        rendered = await page.result(
            "context.render", {"session_id": mine, "adapter": "openai-chat"}
        )
        assert rendered["adapter"] == "openai-chat"
        view = await page.result("memory.view", {"session_id": mine})
        assert view["session_id"] == mine
        assert (await page.result("memory.get_strategy", {"session_id": mine}))["effective"]
        exported = await page.result("export.session", {"session_id": mine})
        assert exported["trace_count"] >= 1
        subscribed = await page.result("events.subscribe", {"session_id": mine})
        assert subscribed["last_seq"] == 4

        # Other sessions: refused, whatever the method.
        for method in (
            "session.get",
            "events.load",
            "context.build",
            "memory.view",
            "events.subscribe",
            "export.session",
            "memory.get_strategy",
        ):
            message = await page.refused(method, {"session_id": other})
            assert "params.session_id" in message
        # The agent as a whole (no session named) is beyond a session token too.
        await page.refused("memory.view")
        await page.refused("memory.get_strategy")
        # Writes, deletes and imports: refused by scope, even on its own session.
        for method, params in (
            ("events.append", {"session_id": mine, "events": []}),
            ("turn.persist", {"session_id": mine, "messages": []}),
            ("memory.compact", {"session_id": mine}),
            ("memory.set_strategy", {"session_id": mine, "strategy": None}),
            ("session.create", {"session_id": mine}),
            ("session.delete", {"session_id": mine}),
            ("events.delete", {"session_id": mine, "event_ids": ["x"]}),
            ("import.session", {"session_id": mine, "files": {}}),
        ):
            assert "token.scope" in await page.refused(method, params)

        # Live updates of its own session arrive; the other session's do not.
        async with SessionClient(server.url, AGENT, token=ADMIN) as admin:
            await admin.persist_turn(other, turn_messages(2))
            await admin.persist_turn(mine, turn_messages(2))
        note = await page.notification()
        assert note["method"] == "events.appended"
        assert note["params"]["session_id"] == mine
        assert [e["seq"] for e in note["params"]["events"]] == [5, 6, 7, 8]
        assert page.notifications == []

    # Another agent: refused at the handshake; the cross-agent endpoint: refused per call.
    with pytest.raises(InvalidStatus) as info:
        async with connect(agent_url(server, "billing-bot"), subprotocols=browser_protocols(token)):
            pass
    assert info.value.response.status_code == 403
    async with connect(f"{server.url}/v1", subprotocols=browser_protocols(token)) as ws:
        page = Browser(ws)
        await page.refused("agents.list")
        await page.refused("memory.list_snapshots")
        assert (await page.result("adapters.list"))["adapters"]


async def test_session_write_token_creates_only_its_own_sessions(
    server: RunningServer, clock: Clock
) -> None:
    token = signed(clock, sessions=["chat-1"], scope="write")
    async with connect(agent_url(server), **bearer(token)) as ws:
        page = Browser(ws)
        assert (await page.result("session.create", {"session_id": "chat-1"}))["id"] == "chat-1"
        await page.refused("session.create", {})
        await page.refused("session.create", {"session_id": "chat-2"})
        appended = await page.result(
            "events.append",
            {"session_id": "chat-1", "events": [{"action": "user_message", "content": "hi"}]},
        )
        assert appended["last_seq"] == 1
        await page.refused("session.delete", {"session_id": "chat-1"})
        await page.refused("memory.set_strategy", {"strategy": None})  # the agent default


async def test_static_token_scopes(server: RunningServer) -> None:
    async with SessionClient(server.url, AGENT, token="writer") as writer:
        sid = await writer.create_session()
        await writer.persist_turn(sid, turn_messages(1))
        with pytest.raises(
            Exception, match=re.escape("token.scope: 'session.delete' needs scope 'admin'")
        ):
            await writer.delete_session(sid)
    async with SessionClient(server.url, AGENT, token="reader") as reader:
        assert len(await reader.load_events(sid)) == 4
        with pytest.raises(Exception, match="needs scope 'write', this token has 'read'"):
            await reader.persist_turn(sid, turn_messages(2))
    async with SessionClient(server.url, AGENT, token=ADMIN) as admin:
        assert await admin.delete_session(sid)


# ------------------------------------------------------------------ read-scoped builds


async def compaction_count(client: SessionClient, sid: str) -> int:
    return len(await client.load_events(sid, limit=None, actions=["compaction"]))


async def test_read_scoped_build_applies_the_latest_record_but_writes_none(
    server: RunningServer, clock: Clock
) -> None:
    strategy = {"mode": "compact", "compact_trigger_turns": 2, "compact_keep": 1}
    async with SessionClient(server.url, AGENT, token=ADMIN) as admin:
        sid = await admin.create_session()
        for n in range(1, 4):
            await admin.persist_turn(sid, turn_messages(n))
        await admin.call("memory.set_strategy", {"session_id": sid, "strategy": strategy})
        read = signed(clock, sessions=[sid], scope="read")
        async with SessionClient(server.url, AGENT, token=read) as reader:
            # A trigger is due, but a read-only build appends no record.
            for method in ("context.build", "context.render"):
                params: dict[str, Any] = {"session_id": sid}
                if method == "context.render":
                    params["adapter"] = "openai-chat"
                await reader.call(method, params)
            assert await compaction_count(admin, sid) == 0
            assert (await admin.get_session(sid))["last_seq"] == 12

            # A write-scoped build compacts (appends one record) ...
            write = signed(clock, sessions=[sid], scope="write")
            async with SessionClient(server.url, AGENT, token=write) as writer:
                by_writer = await writer.call("context.build", {"session_id": sid})
            assert await compaction_count(admin, sid) == 1
            last_seq = (await admin.get_session(sid))["last_seq"]

            # ... and later read builds apply that record without adding another.
            await admin.persist_turn(sid, turn_messages(4))
            await admin.persist_turn(sid, turn_messages(5))
            by_reader = await reader.call("context.build", {"session_id": sid})
            assert await compaction_count(admin, sid) == 1
            assert (await admin.get_session(sid))["last_seq"] == last_seq + 8
            compacted = [m for m in by_reader["messages"] if m.get("compacted")]
            assert compacted, "the latest record is applied to a read build"
            assert compacted == [m for m in by_writer["messages"] if m.get("compacted")]


# ------------------------------------------------------------------ expiry on an open connection


async def test_the_next_call_after_expiry_is_refused_and_the_connection_closed(
    server: RunningServer, clock: Clock
) -> None:
    token = signed(clock, scope="write", ttl=60)
    async with connect(agent_url(server), **bearer(token)) as ws:
        page = Browser(ws)
        assert await page.result("session.list") == EMPTY_PAGE
        clock.now += 61
        answer = await page.call("session.list")
        assert answer["error"]["code"] == -32003
        assert answer["error"]["message"] == "token expired"
        assert answer["error"]["data"] == {"field": "token", "reason": "token expired"}
        await asyncio.wait_for(ws.wait_closed(), 10)
        assert (ws.close_code, ws.close_reason) == (1008, "token expired")
    # And the same token cannot open a new connection.
    status, body, _ = await refusal(agent_url(server), **bearer(token))
    assert (status, body) == (401, "401 Unauthorized: token expired\n")


async def test_an_idle_connection_is_closed_when_its_token_expires(
    server: RunningServer, clock: Clock
) -> None:
    token = signed(clock, ttl=60)
    exp = jwt.decode(token, options={"verify_signature": False})["exp"]
    clock.now = exp - 0.05  # the token has 50 ms to live
    async with connect(agent_url(server), subprotocols=browser_protocols(token)) as ws:
        await asyncio.wait_for(ws.wait_closed(), 10)
        assert (ws.close_code, ws.close_reason) == (1008, "token expired")


# ------------------------------------------------------------------ rotation (in-process)


async def test_reload_closes_connections_whose_token_is_no_longer_valid(
    server: RunningServer, clock: Clock
) -> None:
    old_jwt = signed(clock, scope="write")
    async with (
        connect(agent_url(server), **bearer(old_jwt)) as by_old_jwt,
        connect(agent_url(server), **bearer("writer")) as by_writer,
        connect(agent_url(server), **bearer(ADMIN)) as by_admin,
        connect(f"{server.url}/v1", **bearer("reader")) as by_reader,
    ):
        pages = [Browser(ws) for ws in (by_old_jwt, by_writer, by_admin, by_reader)]
        for page in pages:
            await page.result("session.list" if page.ws is not by_reader else "adapters.list")
        # New secret (the old one kept for verifying), admin kept, writer demoted, reader gone.
        rotated = Authenticator(
            parse_token_specs([ADMIN, "writer:support-*:read"]),
            [OTHER_SECRET.encode(), SECRET.encode()],
        )
        assert server.server.reload_auth(rotated) == 1
        await asyncio.wait_for(by_reader.wait_closed(), 10)
        assert by_reader.close_code == 1008
        assert by_reader.close_reason == "token no longer valid: unknown token"
        assert await pages[0].result("session.list") == EMPTY_PAGE
        await pages[1].refused("session.create", {})  # now read-only
        assert "session_id" in await pages[2].result("session.create", {})

        # Dropping the old secret ends the connections of tokens signed with it.
        assert (
            server.server.reload_auth(
                Authenticator(parse_token_specs([ADMIN]), [OTHER_SECRET.encode()])
            )
            == 2
        )
        await asyncio.wait_for(by_old_jwt.wait_closed(), 10)
        assert by_old_jwt.close_reason == "token no longer valid: token signature does not verify"
        await asyncio.wait_for(by_writer.wait_closed(), 10)
        assert await pages[2].result("session.list")
