"""Usage kept with its turn, ``memory.usage`` totals and budgets, through the local API
(``AgentActor``) on real SQLite files."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from session_server import ActorRegistry
from session_server.process.usage_metrics import UsageMetrics
from session_server.runtime.usage_ledger import UsageSettings
from session_server.values.context import WorkingContext
from session_server.values.errors import BudgetExceededError, InvalidParamsError, NotFoundError
from session_server.values.events import ContextMessage
from session_server.values.usage import parse_prices

AGENT = "usage agent"
PRICES = parse_prices({"gpt": {"input": 2.0, "cached_input": 0.5, "output": 8.0}})


def turn(n: int) -> WorkingContext:
    ctx = WorkingContext()
    ctx.add_message(ContextMessage(role="user", content=f"question {n}"))
    ctx.add_message(ContextMessage(role="assistant", content=f"answer {n}"))
    return ctx


def chat(prompt: int, out: int, cached: int = 0) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": out,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


@pytest.fixture
async def registry(tmp_path: Path) -> Any:
    async with ActorRegistry(
        tmp_path, idle_timeout=None, usage=UsageSettings(prices=PRICES)
    ) as reg:
        yield reg


async def test_usage_is_stored_with_its_turn_and_summed(
    registry: ActorRegistry, tmp_path: Path
) -> None:
    actor = await registry.get(AGENT)
    a = await actor.create_session(session_id="a")
    b = await actor.create_session(session_id="b")
    await actor.persist_working_context(a, turn(1), usage=chat(1000, 100, 600), model="gpt")
    await actor.persist_working_context(
        a,
        turn(2),
        usage={"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 20},
        model="claude",
    )
    await actor.persist_working_context(b, turn(3), usage=chat(50, 5), model="gpt")
    await actor.persist_working_context(b, turn(4))  # no usage: no row
    db = sqlite3.connect(tmp_path / "agents" / AGENT / "agent.sqlite")
    rows = db.execute(
        "SELECT session_id, seq, turn, json_extract(usage, '$[5]'),"
        " json_extract(usage, '$[0]') FROM events WHERE usage IS NOT NULL ORDER BY 1, 2"
    ).fetchall()
    totals = dict(db.execute("SELECT id, json_extract(usage, '$.t') FROM sessions").fetchall())
    db.close()
    # the turn's usage is on its last event, the totals in the session row
    assert rows == [("a", 2, 1, "gpt", 1000), ("a", 4, 2, "claude", 30), ("b", 2, 1, "gpt", 50)]
    assert json.loads(totals["a"]) == {
        "gpt": [1000, 100, 600, 0, 0, 1],
        "claude": [30, 5, 20, 0, 0, 1],
    }
    assert json.loads(totals["b"]) == {"gpt": [50, 5, 0, 0, 0, 1]}

    whole = await actor.memory_usage()
    assert whole["totals"]["input_tokens"] == 1080
    assert whole["totals"]["output_tokens"] == 110
    assert whole["totals"]["cached_input_tokens"] == 620
    assert whole["totals"]["turns"] == 3
    assert "cost" not in whole["totals"]  # claude has no price: never guessed
    by_model = {g["key"]: g for g in (await actor.memory_usage(group_by="model"))["groups"]}
    assert set(by_model) == {"gpt", "claude"}
    assert "cost" not in by_model["claude"]
    expected = (400 * 2 + 600 * 0.5 + 100 * 8 + 50 * 2 + 5 * 8) / 1e6
    assert by_model["gpt"]["cost"] == pytest.approx(expected)
    by_session = {
        g["key"]: g["turns"] for g in (await actor.memory_usage(group_by="session"))["groups"]
    }
    assert by_session == {"a": 2, "b": 1}
    one = await actor.memory_usage(session_id="b")
    assert one["totals"]["cost"] == pytest.approx((50 * 2 + 5 * 8) / 1e6)
    days = (await actor.memory_usage(group_by="day"))["groups"]
    assert len(days) == 1 and days[0]["turns"] == 3
    # a window that is not whole days reads the turn rows
    assert (await actor.memory_usage(since=1))["totals"]["turns"] == 3
    assert (await actor.memory_usage(until=1))["totals"]["turns"] == 0
    with pytest.raises(NotFoundError):
        await actor.memory_usage(session_id="nope")


async def test_a_refused_usage_writes_nothing(registry: ActorRegistry) -> None:
    actor = await registry.get(AGENT)
    sid = await actor.create_session()
    with pytest.raises(InvalidParamsError) as info:
        await actor.persist_working_context(sid, turn(1), usage={"prompt_tokens": -3})
    assert info.value.data == {"field": "usage.prompt_tokens"}
    assert await actor.load_events(sid) == []


async def test_session_budget_refuses_builds_until_raised(registry: ActorRegistry) -> None:
    actor = await registry.get(AGENT)
    sid = await actor.create_session()
    row = await actor.set_session_budget(sid, {"max_total_tokens": 1500})
    assert row["budget"] == {"max_total_tokens": 1500}
    first = await actor.persist_working_context(sid, turn(1), usage=chat(1000, 100))
    assert first.budget_exceeded is False
    crossing = await actor.persist_working_context(sid, turn(2), usage=chat(1000, 100))
    assert crossing.budget_exceeded is True  # stored all the same
    assert len(await actor.load_events(sid)) == 4
    with pytest.raises(BudgetExceededError) as info:
        await actor.build_working_context(sid)
    assert info.value.code == -32005
    assert info.value.data is not None and info.value.data["reason"] == "budget_exceeded"
    assert info.value.data["scope"] == "session"
    ctx = await actor.build_working_context(sid, override_budget=True)
    assert len(ctx.messages) == 4
    await actor.set_session_budget(sid, {"max_total_tokens": 10_000})  # lifts it at once
    assert len((await actor.build_working_context(sid)).messages) == 4
    await actor.set_session_budget(sid, None)
    assert (await actor.get_session(sid) or {})["budget"] is None


async def test_agent_budget_by_cost(registry: ActorRegistry) -> None:
    actor = await registry.get(AGENT)
    a = await actor.create_session()
    b = await actor.create_session()
    assert await actor.set_budget({"max_cost": 0.01}) == {"budget": {"max_cost": 0.01}}
    ok = await actor.persist_working_context(a, turn(1), usage=chat(1000, 100), model="gpt")
    assert ok.budget_exceeded is False  # 0.0028
    over = await actor.persist_working_context(b, turn(2), usage=chat(4000, 1000), model="gpt")
    assert over.budget_exceeded is True  # 0.0028 + 0.016
    for sid in (a, b):  # the agent's budget holds every session
        with pytest.raises(BudgetExceededError) as info:
            await actor.build_working_context(sid)
        assert info.value.data is not None and info.value.data["scope"] == "agent"
    await actor.delete_session(b)  # its usage goes with it
    assert (await actor.memory_usage())["totals"]["turns"] == 1
    days = (await actor.memory_usage(group_by="day"))["groups"]  # the daily totals too
    assert [d["turns"] for d in days] == [1] and days[0]["input_tokens"] == 1000
    assert len((await actor.build_working_context(a)).messages) == 2
    assert await actor.get_budget() == {"budget": {"max_cost": 0.01}}


async def test_budgets_survive_a_restart(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get(AGENT)
        sid = await actor.create_session()
        await actor.set_session_budget(sid, {"max_total_tokens": 10})
        await actor.persist_working_context(sid, turn(1), usage=chat(10, 1))
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get(AGENT)
        with pytest.raises(BudgetExceededError):
            await actor.build_working_context(sid)
        assert (await actor.memory_usage())["totals"]["total_tokens"] == 11


async def test_an_idempotent_replay_is_counted_once_in_the_metrics(tmp_path: Path) -> None:
    metrics = UsageMetrics(CollectorRegistry())
    settings = UsageSettings(prices=PRICES, metrics=metrics)
    async with ActorRegistry(tmp_path, idle_timeout=None, usage=settings) as reg:
        actor = await reg.get(AGENT)
        sid = await actor.create_session()
        first = await actor.persist_working_context(
            sid, turn(1), usage=chat(1000, 100), model="gpt", idempotency_key="k1"
        )
        again = await actor.persist_working_context(
            sid, turn(1), usage=chat(1000, 100), model="gpt", idempotency_key="k1"
        )
        assert again == first  # the first answer, replayed: nothing written, nothing counted
        tokens, cost = metrics.snapshot()
        assert tokens == {"all": [1000, 100, 0, 0, 0]}
        assert cost == {"all": pytest.approx((1000 * 2 + 100 * 8) / 1e6)}
        assert (await actor.memory_usage())["totals"]["turns"] == 1  # stored once too
