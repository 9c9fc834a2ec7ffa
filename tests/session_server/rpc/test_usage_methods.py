"""memory.usage, budgets and retention over a real server, through the Python client and
the sync client; the usage counters on /metrics."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from session_server.client import SessionClient
from session_server.client.sync_client import SyncSessionClient
from session_server.runtime.usage_ledger import UsageSettings
from session_server.values.errors import BudgetExceededError, InvalidParamsError, NotFoundError
from session_server.values.usage import parse_prices
from tests.support.plain_http import http_get
from tests.support.server import RunningServer, running_server

AGENT = "usage rpc agent"
PRICES = parse_prices({"gpt": {"input": 1.0, "output": 4.0}})


def messages(n: int) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": f"question {n}"},
        {"role": "assistant", "content": f"answer {n}"},
    ]


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    options = {"usage": UsageSettings(prices=PRICES, metrics_label=r"^(\w+)")}
    async with running_server(tmp_path / "memory", registry_options=options) as running:
        yield running


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[SessionClient]:
    async with SessionClient(server.url, AGENT) as c:
        yield c


async def test_usage_and_budget_over_the_wire(server: RunningServer, client: SessionClient) -> None:
    sid = await client.create_session()
    row = await client.set_session_budget(sid, {"max_total_tokens": 100})
    assert row["budget"] == {"max_total_tokens": 100} and row["expires_at"] is None
    raw = await client.call(
        "turn.persist",
        {
            "session_id": sid,
            "messages": messages(1),
            "usage": {"input_tokens": 60, "output_tokens": 10},
            "model": "gpt",
        },
    )
    assert raw["budget_exceeded"] is False and raw["seqs"] == [1, 2]
    over = await client.persist_turn(
        sid, messages(2), usage={"prompt_tokens": 30, "completion_tokens": 5}, model="gpt"
    )
    assert over.budget_exceeded is True
    with pytest.raises(BudgetExceededError) as info:
        await client.build_context(sid)
    assert info.value.code == -32005
    assert info.value.data is not None and info.value.data["reason"] == "budget_exceeded"
    with pytest.raises(BudgetExceededError):
        await client.render_context(sid, "openai-chat")
    ctx = await client.build_context(sid, override_budget=True)
    assert len(ctx.messages) == 4
    rendered = await client.render_context(sid, "openai-chat", override_budget=True)
    assert len(rendered["payload"]["messages"]) == 4
    usage = await client.memory_usage(session_id=sid, group_by="model")
    assert usage["totals"] == {
        "input_tokens": 90,
        "output_tokens": 15,
        "cached_input_tokens": 0,
        "cache_write_tokens": 0,
        "reasoning_tokens": 0,
        "total_tokens": 105,
        "turns": 2,
        "cost": pytest.approx((90 * 1.0 + 15 * 4.0) / 1e6),
    }
    assert [g["key"] for g in usage["groups"]] == ["gpt"]
    # metadata and budget are updated independently
    updated = await client.update_session(sid, {"team": "x"})
    assert updated["budget"] == {"max_total_tokens": 100} and updated["metadata"] == {"team": "x"}
    await client.set_session_budget(sid, {"max_total_tokens": 1000})
    assert len((await client.build_context(sid)).messages) == 4
    assert (await client.get_session(sid) or {})["metadata"] == {"team": "x"}
    chart = await client.usage_chart(sid)
    assert [t["input_tokens"] for t in chart["turns"]] == [60, 30]
    assert chart["budget"] == {"max_total_tokens": 1000} and chart["expires_at"] is None
    metrics = (await http_get(server.url, "/metrics")).body
    assert 'session_server_usage_tokens_total{group="usage",kind="input"} 90.0' in metrics


async def test_session_list_shows_budget_and_expiry_as_session_get_does(
    client: SessionClient,
) -> None:
    plain = await client.create_session()
    capped = await client.create_session()
    await client.set_session_budget(capped, {"max_cost": 2.5})
    await client.call("retention.set", {"policy": {"max_idle_days": 2}})
    await client.call("retention.set", {"policy": {"max_age_days": 1}, "session_id": plain})
    listed = {s["id"]: s for s in await client.list_sessions()}
    for sid in (plain, capped):
        got = await client.get_session(sid) or {}
        assert listed[sid]["budget"] == got["budget"]
        assert listed[sid]["expires_at"] == got["expires_at"] is not None
    assert listed[capped]["budget"] == {"max_cost": 2.5} and listed[plain]["budget"] is None
    page = await client.call("session.list", {"limit": 1})
    assert set(page["sessions"][0]) >= {"budget", "expires_at"}


async def test_agent_budget_and_refusals(client: SessionClient) -> None:
    sid = await client.create_session()
    assert await client.set_budget({"max_cost": 0.5}) == {"budget": {"max_cost": 0.5}}
    assert await client.get_budget() == {"budget": {"max_cost": 0.5}}
    with pytest.raises(InvalidParamsError) as info:
        await client.set_budget({"max_cost": -1})
    assert info.value.data is not None and info.value.data["field"] == "budget.max_cost"
    with pytest.raises(InvalidParamsError):
        await client.call("session.update", {"session_id": sid})
    with pytest.raises(InvalidParamsError) as info:
        await client.persist_turn(sid, messages(1), usage={"prompt_tokens": "7"})
    assert info.value.data is not None and info.value.data["field"] == "usage.prompt_tokens"
    with pytest.raises(InvalidParamsError):
        await client.call("memory.usage", {"group_by": "week"})
    with pytest.raises(NotFoundError):
        await client.memory_usage(session_id="missing")
    assert await client.set_budget(None) == {"budget": None}


async def test_retention_over_the_wire(client: SessionClient) -> None:
    sid = await client.create_session()
    await client.create_session(session_id="other")
    assert await client.retention_get() == {"policy": None}
    out = await client.retention_set({"max_idle_days": 2.5})
    assert out == {"policy": {"max_idle_days": 2.5}}
    one = await client.retention_set({"max_age_days": 1}, session_id=sid)
    assert one["effective"] == {"max_idle_days": 2.5, "max_age_days": 1}
    session = await client.get_session(sid) or {}
    assert session["expires_at"] == session["created_at"] + 86_400_000
    preview = await client.retention_preview({"max_sessions": 1})
    assert [s["session_id"] for s in preview["sessions"]] == [sid]
    assert len(await client.list_sessions()) == 2  # a preview removes nothing
    with pytest.raises(InvalidParamsError) as info:
        await client.retention_set({"max_idle_days": -1})
    assert info.value.data is not None and info.value.data["field"] == "policy.max_idle_days"


async def test_the_sync_client(server: RunningServer) -> None:
    def run() -> dict[str, Any]:
        with SyncSessionClient(server.url, AGENT) as sync:
            sid = sync.create_session()
            sync.persist_turn(sid, messages(1), usage={"prompt_tokens": 3, "completion_tokens": 1})
            return dict(sync.memory_usage())

    totals = (await asyncio.to_thread(run))["totals"]
    assert totals["total_tokens"] == 4 and "cost" not in totals


def events(n: int) -> list[dict[str, Any]]:
    return [
        {"action": "user_message", "content": f"question {n}"},
        {"action": "agent_message", "content": f"answer {n}"},
    ]


async def test_events_append_stores_usage(server: RunningServer, client: SessionClient) -> None:
    """``events.append {usage?, model?}`` (what the ADK service sends: its events are
    appended verbatim, not persisted as a turn) stores the usage as ``turn.persist`` does:
    once per idempotency key, with the batch's last event, counted by ``memory.usage``;
    the answer says ``budget_exceeded`` only when usage was given."""
    sid = await client.create_session()
    await client.set_session_budget(sid, {"max_total_tokens": 1000})
    gemini = {
        "prompt_token_count": 700,
        "candidates_token_count": 200,
        "cached_content_token_count": 500,
        "thoughts_token_count": 40,
    }
    raw = await client.call(
        "events.append",
        {
            "session_id": sid,
            "events": events(1),
            "usage": gemini,
            "model": "gemini",
            "idempotency_key": "k1",
        },
    )
    assert raw == {"seqs": [1, 2], "last_seq": 2, "compaction_required": False,
                   "budget_exceeded": False}  # fmt: skip
    again = await client.append_events(sid, events(1), usage=gemini, idempotency_key="k1")
    assert again.seqs == [1, 2]  # a replay: stored and counted once
    over = await client.append_events(sid, events(2), usage={"input_tokens": 100})
    assert over.budget_exceeded is True
    plain = await client.call("events.append", {"session_id": sid, "events": events(3)})
    assert "budget_exceeded" not in plain
    usage = await client.memory_usage(session_id=sid, group_by="model")
    assert usage["totals"]["input_tokens"] == 800
    assert usage["totals"]["output_tokens"] == 240
    assert usage["totals"]["cached_input_tokens"] == 500
    assert usage["totals"]["reasoning_tokens"] == 40
    assert usage["totals"]["turns"] == 2
    chart = await client.usage_chart(sid)
    assert [(t["seq"], t["model"]) for t in chart["turns"]] == [(2, "gemini"), (4, None)]
    with pytest.raises(InvalidParamsError) as info:
        await client.append_events(sid, events(4), usage={"prompt_token_count": -1})
    assert info.value.data is not None and info.value.data["field"] == "usage.prompt_token_count"
    assert (await client.get_session(sid) or {})["last_seq"] == 6  # the refusal wrote nothing
