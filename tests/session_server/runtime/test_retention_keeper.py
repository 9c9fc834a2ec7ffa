"""Retention policies, previews and sweeps through the local API, on real files: expired
sessions are erased as ``session.delete`` erases them, raw events only below a summary."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from session_server import ActorRegistry
from session_server.runtime.retention_keeper import FIRST_BATCH
from session_server.values.context import WorkingContext
from session_server.values.errors import InvalidParamsError, NotFoundError
from session_server.values.events import ContextMessage
from session_server.values.retention import DAY_MS
from tests.support.waiting import until

AGENT = "retention agent"


async def fill(actor: Any, sid: str, turns: int) -> None:
    for n in range(turns):
        ctx = WorkingContext()
        ctx.add_message(ContextMessage(role="user", content=f"question {n}"))
        ctx.add_message(ContextMessage(role="assistant", content=f"answer {n} " * 5))
        await actor.persist_working_context(
            sid, ctx, usage={"prompt_tokens": 10, "completion_tokens": 2}
        )


def now() -> int:
    return int(time.time() * 1000)


@pytest.fixture
async def registry(tmp_path: Path) -> Any:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        yield reg


async def test_set_get_and_expiry(registry: ActorRegistry) -> None:
    actor = await registry.get(AGENT)
    sid = await actor.create_session()
    assert await actor.retention_get() == {"policy": None}
    assert (await actor.get_session(sid) or {})["expires_at"] is None
    await actor.retention_set({"max_age_days": 30, "max_idle_days": 7})
    own = await actor.retention_set({"max_idle_days": 1}, session_id=sid)
    assert own["policy"] == {"max_idle_days": 1}
    assert own["effective"] == {"max_age_days": 30, "max_idle_days": 1}
    row = await actor.get_session(sid) or {}
    assert row["expires_at"] == row["updated_at"] + DAY_MS
    assert own["expires_at"] == row["expires_at"]
    with pytest.raises(InvalidParamsError) as info:
        await actor.retention_set({"max_sessions": 3}, session_id=sid)
    assert info.value.data == {"field": "policy.max_sessions"}
    with pytest.raises(NotFoundError):
        await actor.retention_set({"max_idle_days": 1}, session_id="nope")
    cleared = await actor.retention_set(None, session_id=sid)
    assert cleared["policy"] is None and cleared["effective"] == {
        "max_age_days": 30,
        "max_idle_days": 7,
    }


async def test_sweep_erases_expired_sessions_as_delete_does(
    registry: ActorRegistry, tmp_path: Path
) -> None:
    actor = await registry.get(AGENT)
    old = await actor.create_session(session_id="old")
    keep = await actor.create_session(session_id="keep")
    await fill(actor, old, 2)
    await fill(actor, keep, 2)
    await actor.retention_set({"max_idle_days": 100}, session_id=keep)
    await actor.retention_set({"max_idle_days": 10})
    deleted: list[str] = []
    actor.subscribe(old, lambda events: None, on_deleted=lambda: deleted.append(old))
    later = now() + 11 * DAY_MS
    preview = await actor.retention.preview(actor)
    assert preview == {"sessions": [], "raw_events": []}  # not expired yet, at this time
    plan = await actor.retention.plan(actor, now_ms=later)
    assert plan.sessions == [(old, "max_idle_days")]
    assert await actor.get_session(old) is not None  # a plan removes nothing
    done = await actor.sweep_retention(now_ms=later)
    assert done == {"sessions": 1, "events": 0, "more": False}
    assert deleted == [old]
    assert await actor.get_session(old) is None
    assert await actor.get_session(keep) is not None
    assert not (tmp_path / "agents" / AGENT / "sessions" / old).exists()
    db = sqlite3.connect(tmp_path / "agents" / AGENT / "agent.sqlite")
    for table in ("events", "session_days", "tool_calls", "idempotency"):
        assert (
            db.execute(f"SELECT COUNT(*) FROM {table} WHERE session_id = ?", (old,)).fetchone()[0]
            == 0
        )
    db.close()
    erased = registry.metrics.registry.get_sample_value(
        "session_server_retention_sessions_erased_total", {"reason": "max_idle_days"}
    )
    assert erased == 1


async def test_max_sessions_goes_oldest_idle_first_in_bounded_steps(
    registry: ActorRegistry,
) -> None:
    actor = await registry.get(AGENT)
    sids = [await actor.create_session(session_id=f"s{i:02d}") for i in range(20)]
    for sid in sids:
        await fill(actor, sid, 1)
    await actor.retention_set({"max_sessions": 2})
    preview = await actor.retention_preview()
    assert [s["session_id"] for s in preview["sessions"]] == sids[:18]
    # a step is one batch of sessions (one transaction); the first is FIRST_BATCH
    first = await actor.sweep_retention(max_steps=1)
    assert first == {"sessions": FIRST_BATCH, "events": 0, "more": True}
    left = sorted(s["id"] for s in await actor.list_sessions())
    assert left == sids[FIRST_BATCH:]  # the oldest idle went first
    second = await actor.sweep_retention()
    assert second == {"sessions": 18 - FIRST_BATCH, "events": 0, "more": False}
    assert sorted(s["id"] for s in await actor.list_sessions()) == sids[18:]


async def test_preview_of_a_policy_not_set(registry: ActorRegistry) -> None:
    actor = await registry.get(AGENT)
    sid = await actor.create_session()
    out = await actor.retention_preview({"max_sessions": 1})
    assert out == {"sessions": [], "raw_events": []}
    await actor.create_session(session_id="second")
    out = await actor.retention_preview({"max_sessions": 1})
    assert [s["session_id"] for s in out["sessions"]] == [sid]
    assert await actor.retention_get() == {"policy": None}


async def test_max_raw_events_erases_only_what_a_summary_covers(registry: ActorRegistry) -> None:
    actor = await registry.get(AGENT)
    sid = await actor.create_session()
    plain = await actor.create_session()
    await fill(actor, sid, 8)
    await fill(actor, plain, 8)
    out = await actor.compact(sid, strategy={"mode": "summarize", "raw_tail_turns": 2})
    assert out["compacted"] is True
    await fill(actor, sid, 1)
    before = await actor.build_working_context(sid)
    await actor.retention_set({"max_raw_events": 4})
    done = await actor.sweep_retention()
    assert done["events"] == 12  # turns 1-6 (12 events) are below the summary's tail
    after = await actor.build_working_context(sid)
    assert after.messages == before.messages
    assert after.system_instructions == before.system_instructions
    events = await actor.load_events(sid, limit=None)
    assert [e.action for e in events].count("compaction") == 1
    assert len([e for e in events if e.action != "compaction"]) == 6
    # a session without a summary keeps every raw event
    assert len(await actor.load_events(plain, limit=None)) == 16
    assert (await actor.sweep_retention())["events"] == 0


async def test_the_registry_sweeps_in_the_background(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None, retention_interval=0.05) as reg:
        actor = await reg.get(AGENT)
        sid = await actor.create_session()
        gone: list[str] = []
        actor.subscribe(sid, lambda events: None, on_deleted=lambda: gone.append(sid))
        await actor.retention_set({"max_idle_days": 1e-9})  # about 0.1 ms
        await until(lambda: gone == [sid], "the background sweep erasing the idle session")
        assert await actor.get_session(sid) is None
