"""The end-of-turn snapshot: the cache is checked once per mirror flush, not per turn."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from session_server import ActorRegistry
from session_server.core.agent_core import AgentCore
from session_server.core.context import WorkingContext
from session_server.core.events import ContextMessage
from session_server.mirror import SNAPSHOT_FILE


def turn(n: int) -> list[ContextMessage]:
    return [
        ContextMessage(role="user", content=f"question {n}"),
        ContextMessage(role="assistant", content=f"answer {n}"),
    ]


async def test_turns_between_two_flushes_check_the_cache_once_and_the_last_one_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checks: list[str] = []
    original = AgentCore.cached_view

    def recording(self: AgentCore, session_id: str, limit: int) -> Any:
        checks.append(session_id)
        return original(self, session_id, limit)

    monkeypatch.setattr(AgentCore, "cached_view", recording)
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("agent")
        actor.mirror.delay = 3600.0  # flushes only when drained, below
        sid = await actor.create_session()
        path = actor.mirror.session_dir(sid) / SNAPSHOT_FILE
        for flush in range(2):
            checks.clear()
            for n in range(5):
                ctx = WorkingContext()
                ctx.add_messages(turn(10 * flush + n))
                last = await actor.persist_working_context(sid, ctx)
            assert checks == [sid]  # the first turn since the last flush, only
            await actor.mirror.drain()
            assert json.loads(path.read_text(encoding="utf-8"))["last_seq"] == last.last_seq


async def test_a_session_the_cache_let_go_gets_its_snapshot_after_the_next_turn(
    tmp_path: Path,
) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("agent")
        actor.mirror.delay = 3600.0
        sid = await actor.create_session()
        path = actor.mirror.session_dir(sid) / SNAPSHOT_FILE
        for n in range(2):
            ctx = WorkingContext()
            ctx.add_messages(turn(n))
            await actor.persist_working_context(sid, ctx)
        actor.core._recent.forget(sid)  # the cache lets the session go before the flush
        await actor.mirror.drain()
        assert not path.exists()  # that flush could not render it: nothing written
        ctx = WorkingContext()
        ctx.add_messages(turn(2))
        last = await actor.persist_working_context(sid, ctx)  # checks and reads the window
        await actor.mirror.drain()
        assert json.loads(path.read_text(encoding="utf-8"))["last_seq"] == last.last_seq
