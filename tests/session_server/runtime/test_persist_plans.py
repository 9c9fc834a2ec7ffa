"""``persist_working_context`` plans a small turn once, and once more per read it needs
(``AgentActor.persist_working_context``, ``AgentActor.decide``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from session_server import ActorRegistry
from session_server.core.agent_core import AgentCore
from session_server.core.needs import Need
from session_server.values.context import WorkingContext
from session_server.values.events import ContextMessage


async def test_a_turn_is_planned_once_per_answer_of_the_core(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None, mirror=False) as reg:
        await (await reg.get("agent")).create_session(session_id="s")
    answers: list[str] = []
    plan_turn = AgentCore.plan_turn

    def recorded(self: AgentCore, turn: Any, known: Any) -> Any:
        step = plan_turn(self, turn, known)
        answers.append(type(step).__name__ if isinstance(step, Need) else "plan")
        return step

    monkeypatch.setattr(AgentCore, "plan_turn", recorded)
    async with ActorRegistry(tmp_path, idle_timeout=None, mirror=False) as reg:
        actor = await reg.get("agent")  # a cold cache: the session's state is read first
        for text in ("one", "two"):
            ctx = WorkingContext(base_seq=0)
            ctx.add_messages([ContextMessage(role="user", content=text)])
            await actor.persist_working_context("s", ctx)
        stored = await actor.load_events("s", limit=None)
    # Cold: each read the core needs, once (a need is not asked for twice), then the
    # plan; warm: the plan at once.
    *needs, cold, warm = answers
    assert needs and len(set(needs)) == len(needs), answers
    assert (cold, warm) == ("plan", "plan")
    assert [e.content for e in stored] == ["one", "two"]
