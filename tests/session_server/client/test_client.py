"""``SessionClient`` against a real in-process server: typed results, mapped errors,
automatic idempotency keys, subscriptions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from session_server.client import ConnectionLostError, SessionClient, error_from
from session_server.values.errors import (
    BudgetExceededError,
    ConflictError,
    ForbiddenError,
    InternalError,
    InvalidAgentIdError,
    InvalidParamsError,
    MethodNotFoundError,
    NotFoundError,
    NotOwnerError,
    UnavailableError,
)
from session_server.values.events import ContextMessage, SessionEvent, ToolCall
from session_server.values.plans import AppendResult
from tests.support.server import RunningServer, running_server, turn_messages

AGENT = "client é?#%"  # needs quoting in the URL


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "memory", tokens=["tok", "narrow:other-*"]) as running:
        yield running


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[SessionClient]:
    async with SessionClient(server.url, AGENT, token="tok") as c:
        yield c


async def test_sessions(client: SessionClient) -> None:
    sid = await client.create_session({"k": "v"}, session_id="one")
    assert sid == "one"
    generated = await client.create_session()
    row = await client.get_session("one")
    assert row["metadata"] == {"k": "v"} and row["agent_id"] == AGENT
    assert {s["id"] for s in await client.list_sessions()} == {"one", generated}
    assert await client.delete_session("one") is True
    assert await client.delete_session("one") is False
    with pytest.raises(NotFoundError, match="one"):
        await client.get_session("one")


async def test_events_round_trip_as_structs(client: SessionClient) -> None:
    sid = await client.create_session()
    result = await client.append_events(
        sid,
        [
            SessionEvent(action="user_message", content="q"),
            {"action": "tool_call_request", "tool_calls": [{"id": "c", "name": "f"}]},
            SessionEvent(action="tool_result", content="r", tool_call_id="c", tool_name="f"),
        ],
    )
    assert result == AppendResult(seqs=[1, 2, 3], last_seq=3)
    events = await client.load_events(sid)
    assert all(isinstance(e, SessionEvent) for e in events)
    assert events[1].tool_calls == [ToolCall(id="c", name="f", arguments={})]
    assert [e.seq for e in await client.load_events(sid, limit=1, tail=False)] == [1]
    assert [e.seq for e in await client.load_events(sid, after_seq=1, actions=["tool_result"])] == [
        3
    ]
    assert await client.delete_events(sid, [events[0].id]) == 1
    assert [e.seq for e in await client.load_events(sid, limit=None)] == [2, 3]


async def test_context_build_and_persist(client: SessionClient) -> None:
    sid = await client.create_session()
    await client.persist_turn(sid, turn_messages(1), usage={"prompt_tokens": 10})
    ctx = await client.build_context(sid, system_instructions="sys")
    assert ctx.system_instructions == ["sys"]
    assert ctx.base_seq == 4 and ctx.token_count is not None and ctx.token_count > 0
    assert all(isinstance(m, ContextMessage) for m in ctx.messages)
    assert [m.content for m in ctx.messages] == [m.content for m in turn_messages(1)]
    assert ctx.get_new_messages() == []

    ctx.add_message(ContextMessage(role="user", content="next"))
    result = await client.persist_context(sid, ctx, on_conflict="reject")
    assert result.seqs == [5]
    stale = await client.build_context(sid)
    await client.persist_turn(sid, [ContextMessage(role="user", content="moved on")])
    stale.add_message(ContextMessage(role="user", content="too late"))
    with pytest.raises(ConflictError) as info:
        await client.persist_context(sid, stale, on_conflict="reject")
    assert info.value.data is not None and info.value.data["last_seq"] == 6
    appended = await client.persist_context(sid, stale)  # "append" ignores the base
    assert appended.seqs == [7]


async def test_idempotency_keys(client: SessionClient, server: RunningServer) -> None:
    sid = await client.create_session()
    first = await client.persist_turn(sid, turn_messages(1), idempotency_key="retry-me")
    async with SessionClient(server.url, AGENT, token="tok") as other:  # "reconnected"
        again = await other.persist_turn(sid, turn_messages(1), idempotency_key="retry-me")
        assert again == first
        ev = await other.append_events(sid, [SessionEvent(content="e")], idempotency_key="k")
        assert (
            await other.append_events(sid, [SessionEvent(content="e")], idempotency_key="k") == ev
        )
    # Without a key, each call is a distinct write (a fresh time-ordered UUID per call).
    await client.append_events(sid, [SessionEvent(content="same")])
    await client.append_events(sid, [SessionEvent(content="same")])
    assert (await client.get_session(sid))["last_seq"] == 7


async def test_lost_connection_reports_the_key_to_retry_with(server: RunningServer) -> None:
    client = SessionClient(server.url, AGENT, token="tok")
    await client.connect()
    sid = await client.create_session()
    await client.close()
    with pytest.raises(ConnectionLostError) as info:
        await client.persist_turn(sid, turn_messages(1))
    key = info.value.idempotency_key
    assert key
    async with SessionClient(server.url, AGENT, token="tok") as retry:
        done = await retry.persist_turn(sid, turn_messages(1), idempotency_key=key)
        assert done.seqs == [1, 2, 3, 4]
        assert (await retry.persist_turn(sid, turn_messages(1), idempotency_key=key)) == done


async def test_errors_are_mapped(client: SessionClient) -> None:
    with pytest.raises(InvalidParamsError) as info:
        await client.append_events("s", [{"content": 1}])
    assert "params.events[0].content" in info.value.message
    with pytest.raises(MethodNotFoundError, match="nope"):
        await client.call("nope")
    with pytest.raises(NotFoundError):
        await client.build_context("ghost")
    err = error_from({"code": -32002, "message": "m", "data": {"last_seq": 3}})
    assert isinstance(err, ConflictError) and err.data == {"last_seq": 3}
    assert type(error_from({"code": -1, "message": "odd"})) is InternalError
    # -32005 is shared: the reason names the class
    for reason, cls in (
        ("not_owner", NotOwnerError),
        ("budget_exceeded", BudgetExceededError),
        ("no_fds", UnavailableError),
    ):
        err = error_from({"code": -32005, "message": "m", "data": {"reason": reason}})
        assert type(err) is cls and isinstance(err, UnavailableError)


async def test_handshake_refusals_raise_project_errors(server: RunningServer) -> None:
    with pytest.raises(ForbiddenError) as info:
        await SessionClient(server.url, AGENT).connect()
    assert info.value.data == {"http_status": 401}
    with pytest.raises(ForbiddenError) as info:
        await SessionClient(server.url, AGENT, token="narrow").connect()
    assert info.value.data == {"http_status": 403}
    with pytest.raises(InvalidAgentIdError):
        SessionClient(server.url, "../x")


async def test_subscription_iterates_new_events(
    client: SessionClient, server: RunningServer
) -> None:
    sid = await client.create_session()
    await client.persist_turn(sid, turn_messages(1))
    async with await client.subscribe(sid) as sub:
        assert sub.last_seq == 4
        async with SessionClient(server.url, AGENT, token="tok") as writer:
            await writer.persist_turn(sid, turn_messages(2))
            await writer.append_events(sid, [SessionEvent(content="single")])
        batch = await sub.next_batch()
        assert [e.seq for e in batch] == [5, 6, 7, 8]
        single = await sub.__anext__()
        assert (single.seq, single.content) == (9, "single")


async def test_subscription_ends_with_error_when_the_server_stays_away(
    server: RunningServer,
) -> None:
    client = SessionClient(server.url, AGENT, token="tok", reconnect_budget=0.2)
    await client.connect()
    sid = await client.create_session()
    sub = await client.subscribe(sid)
    waiter = asyncio.create_task(sub.__anext__())
    await server.server.stop()
    with pytest.raises(ConnectionLostError):
        await waiter
    with pytest.raises(ConnectionLostError):
        await client.list_sessions()
    await client.close()
