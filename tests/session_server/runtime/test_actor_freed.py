"""A dropped actor is freed by reference counting alone, with the cyclic GC disabled.

The registry holds its actors weakly (``runtime.registry``): a hibernated actor that
nothing uses must leave memory at once. The actor is composed of parts (write queue,
group commit, subscriptions, compaction turns); a part that kept a reference back to
its actor (the actor itself, a bound method, a closure over it, a task) would make a
cycle, freed only when the cyclic collector runs, which ``serve`` makes rare
(``gc.freeze`` and raised thresholds): memory would grow with the agents seen. Each test
uses an actor on every path that hands the actor or its callables to a part, drops it,
and checks that its weak reference is dead while ``gc`` is disabled.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from session_server import ActorRegistry, AgentActor
from session_server.values.context import WorkingContext
from session_server.values.events import ContextMessage, SessionEvent, ToolCall
from session_server.values.session_rows import SessionRows


def add_turn(ctx: WorkingContext, n: int) -> None:
    ctx.add_message(ContextMessage(role="user", content=f"question {n} " + "word " * 40))
    ctx.add_message(
        ContextMessage(
            role="assistant",
            tool_calls=[ToolCall(id=f"call-{n}", name="lookup", arguments={"n": n})],
        )
    )
    ctx.add_message(
        ContextMessage(role="tool", tool_call_id=f"call-{n}", name="lookup", content=f"r{n}")
    )
    ctx.add_message(ContextMessage(role="assistant", content=f"answer {n}"))


@pytest.fixture
def no_cycle_collector() -> Iterator[None]:
    gc.collect()  # what earlier tests left is not counted here
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def referrers(ref: weakref.ref[AgentActor]) -> str:
    """Who still holds the actor (for the failure message)."""
    actor = ref()
    if actor is None:
        return ""
    return "\n".join(repr(r)[:300] for r in gc.get_referrers(actor))


async def use(actor: AgentActor) -> SessionRows:
    """Every path that gives a part the actor or one of its callables."""
    sid = await actor.create_session(metadata={"k": "v"})
    seen: list[int] = []
    unsubscribe = actor.subscribe(sid, lambda events: seen.extend(e.seq for e in events))
    await actor.append_events(sid, [SessionEvent(action="user_message", content="hello")])
    for n in range(1, 4):  # persisted turns (group commit, effects, snapshots)
        ctx = await actor.build_working_context(sid, system_instructions=["be brief"])
        add_turn(ctx, n)
        await actor.persist_working_context(sid, ctx, idempotency_key=f"turn-{n}")
    assert seen == list(range(1, 14))
    unsubscribe()
    watched = await actor.create_session(session_id="watched")
    actor.subscribe(watched, lambda events: None, on_deleted=lambda: None)
    assert await actor.delete_session(watched)  # ends that subscription
    # A compaction turn, then a summary primed by token pressure (a background task).
    await actor.compact(sid, strategy={"mode": "compact", "compact_keep": 1})
    await actor.set_strategy(
        {"mode": "summarize", "raw_tail_turns": 1, "max_context_tokens": 1000}, session_id=sid
    )
    ctx = await actor.build_working_context(sid)
    add_turn(ctx, 4)
    result = await actor.persist_working_context(sid, ctx, usage={"prompt_tokens": 950})
    assert result.compaction_required
    await actor.build_working_context(sid)  # joins (or finds) the background summary
    await actor.view(sid, 10)
    await actor.pop_event(sid)
    await actor.update_session(sid, {"k": "w"})
    rows = await actor.session_rows(sid)
    # The primed build may still be ending: it ends now (cancelled if it has not).
    await actor.compactions.cancel()
    await actor.mirror_settled()
    assert not actor.busy
    return rows


async def test_a_used_and_hibernated_actor_is_freed_without_the_cycle_collector(
    tmp_path: Path, no_cycle_collector: None
) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as registry:
        actor = await registry.get("freed")
        await use(actor)
        ref = weakref.ref(actor)
        del actor
        assert await registry.hibernate_idle(older_than=0) == 1
        assert ref() is None, referrers(ref)
        assert registry.actor_count == 0
        # It comes back from its file.
        again = await registry.get("freed")
        assert [s["metadata"] for s in await again.list_sessions()] == [{"k": "w"}]


async def test_an_actor_that_imported_and_replaced_its_file_is_freed(
    tmp_path: Path, no_cycle_collector: None
) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as registry:
        rows = await use(await registry.get("source"))
        actor = await registry.get("target")
        await actor.import_rows(rows)
        await actor.clear_session(rows.session.id)
        assert await actor.replace_file(lambda: None) is None
        ref = weakref.ref(actor)
        del actor
        await registry.hibernate_idle(older_than=0)
        assert ref() is None, referrers(ref)
