"""Builds served from the recent cache reuse each event's message: a caller changing its
context never changes the next build, and a warm build equals a cold one (read from
SQLite after a restart), over turns with reused call ids, late and orphan results."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from session_server.runtime.registry import ActorRegistry
from session_server.values.events import ContextMessage, ToolCall

SYSTEM = ["Be brief."]


def _turn(rng: random.Random, n: int) -> list[ContextMessage]:
    call_id = rng.choice([f"call_{n}", "call_1"])  # some providers reuse ids every turn
    out = [
        ContextMessage(role="user", content=f"q{n}"),
        ContextMessage(
            role="assistant", tool_calls=[ToolCall(id=call_id, name="t", arguments={"n": n})]
        ),
    ]
    if rng.random() < 0.8:  # otherwise the call never gets its result (a crash)
        out.append(ContextMessage(role="tool", tool_call_id=call_id, name="t", content=f"r{n}"))
    if rng.random() < 0.2:
        out.append(ContextMessage(role="tool", tool_call_id="gone", name="t", content="orphan"))
    out.append(ContextMessage(role="assistant", content=f"a{n}", metadata={"n": n}))
    return out


async def test_changing_a_built_context_never_changes_the_next_build(tmp_path: Path) -> None:
    rng = random.Random(7)
    limit = 12
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("memo")
        sid = await actor.create_session()
        for n in range(1, 40):
            ctx = await actor.build_working_context(sid, system_instructions=SYSTEM, limit=limit)
            shown = list(ctx.messages)
            if shown:
                # Messages are frozen values shared with the cache: no in-place change.
                with pytest.raises(AttributeError):
                    ctx.messages[0].content = "changed"  # type: ignore[misc]
            # The context's list is the caller's own: anything goes.
            ctx.messages.reverse()
            ctx.messages[:1] = [ContextMessage(role="user", content="replaced")]
            del ctx.messages[len(ctx.messages) // 2 :]
            again = await actor.build_working_context(sid, system_instructions=SYSTEM, limit=limit)
            assert again.messages == shown, n
            again.add_messages(_turn(rng, n))
            await actor.persist_working_context(sid, again)
        warm = await actor.build_working_context(sid, system_instructions=SYSTEM, limit=limit)
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("memo")
        cold = await actor.build_working_context(sid, system_instructions=SYSTEM, limit=limit)
    assert cold.messages == warm.messages
    assert cold.token_count == warm.token_count
    assert cold.omitted_events == warm.omitted_events
    assert any(m.synthetic for m in warm.messages) or any(
        m.tool_call_id and m.tool_call_id.endswith("_2") for m in warm.messages
    )
