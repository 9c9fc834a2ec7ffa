"""Property: a fork's context at its fork point is the source's at that point, byte for byte
(the rendered messages JSON), and a rewind to a point gives back the context the session
had there; over random histories of plain turns, tool turns and compactions, on real files."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from session_server import ActorRegistry, AgentActor
from session_server.values.context import WorkingContext
from session_server.values.events import ContextMessage, ToolCall

INSTRUCTIONS = ["You are terse."]
Step = tuple[str, int]


def rendered(ctx: WorkingContext) -> bytes:
    return msgspec.json.encode(
        {"system": ctx.system_instructions, "messages": ctx.messages, "tokens": ctx.token_count}
    )


def add(ctx: WorkingContext, kind: str, n: int) -> None:
    ctx.add_message(ContextMessage(role="user", content=f"q{n} " * (1 + n % 5)))
    if kind == "tool":
        call = ToolCall(id=f"c{n}", name="look", arguments={"n": n})
        ctx.add_message(ContextMessage(role="assistant", tool_calls=[call]))
        ctx.add_message(
            ContextMessage(role="tool", tool_call_id=f"c{n}", name="look", content=f"out{n} " * 30)
        )
    ctx.add_message(ContextMessage(role="assistant", content=f"a{n}"))


async def build(actor: AgentActor, sid: str) -> bytes:
    return rendered(await actor.build_working_context(sid, system_instructions=INSTRUCTIONS))


async def run(steps: list[Step], fork_pick: int, rewind_pick: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with ActorRegistry(Path(tmp), idle_timeout=None) as reg:
            actor = await reg.get("a")
            sid = await actor.create_session()
            seen: dict[int, bytes] = {0: await build(actor, sid)}
            for kind, n in steps:
                if kind == "compact":
                    await actor.compact(sid, strategy={"mode": "compact", "compact_keep": 1})
                elif kind == "summarize":
                    await actor.compact(sid, strategy={"mode": "summarize", "raw_tail_turns": 1})
                else:
                    ctx = await actor.build_working_context(sid, limit=1)
                    add(ctx, kind, n)
                    await actor.persist_working_context(sid, ctx)
                row = await actor.get_session(sid)
                assert row is not None
                seen[int(row["last_seq"])] = await build(actor, sid)
            points = sorted(seen)
            at = points[fork_pick % len(points)]
            fork = await actor.fork_session(sid, at_seq=at)
            assert await build(actor, fork.session_id) == seen[at], at
            back = points[rewind_pick % len(points)]
            result = await actor.rewind_session(sid, back)
            assert result.to_seq == back and not result.moved_to_turn_start
            assert await build(actor, sid) == seen[back], back
            if result.branch_session_id is not None:
                assert await build(actor, result.branch_session_id) == seen[points[-1]]


_STEP = st.one_of(
    st.tuples(
        st.sampled_from(["plain", "tool", "tool", "compact", "summarize"]), st.integers(0, 99)
    )
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_STEP, min_size=1, max_size=10), st.integers(0, 99), st.integers(0, 99))
def test_forks_and_rewinds_give_back_the_context_of_their_point(
    steps: list[Step], fork_pick: int, rewind_pick: int
) -> None:
    asyncio.run(run(steps, fork_pick, rewind_pick))
