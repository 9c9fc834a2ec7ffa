"""The actor's warm builds (served by its recent cache: ``TailIndex`` windows, kept
messages, the resumed repair scan, the running totals) against cold ones read from the
SQLite file, after every step of random histories on a real store.

Each example drives one agent through appends of hostile events (call ids reused
across turns, results before their calls, duplicate and orphan results, results of calls
that never came), whole turns through ``persist_working_context`` (some raising the
pressure flag), compactions that write records, deletes of events, strategy changes,
concurrent commits and a window read racing a commit, with a recent cache of a few
events so that trims happen on most commits (and, in some examples, a byte budget that
holds a few events a session, so that byte trims happen too). After each step, for several limits, the
view and the built context must be what the same actor gives with a cache that keeps
nothing (every window the store's, every message converted and checked by the build),
and the builder on the cache's messages what the previous builder gave
(``builder_reference``, the oracle).
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from session_server.compaction.builder import build_parts
from session_server.runtime.actor import AgentActor
from session_server.runtime.registry import ActorRegistry
from session_server.values.cache_budget import CacheBudget
from session_server.values.context import WorkingContext
from session_server.values.events import ContextMessage, SessionEvent, ToolCall
from session_server.values.recent import RecentCache

from ..compaction import builder_reference as reference

COMPACT = {"mode": "compact", "compact_keep": 1, "compact_trigger_turns": 1}
LIMITS = (1, 3, 7, 40)
IDS = ("a", "b", "c")  # few ids: reuse across turns, late and duplicate results


def _event(kind: str, call_id: str) -> SessionEvent:
    if kind == "user":
        return SessionEvent(action="user_message", content="q")
    if kind == "answer":
        return SessionEvent(action="agent_message", content="a")
    if kind == "call":
        return SessionEvent(
            action="tool_call_request", tool_calls=[ToolCall(call_id, "t", {"x": 1})]
        )
    return SessionEvent(action="tool_result", tool_call_id=call_id, tool_name="t", content="r")


batches = st.lists(
    st.tuples(
        st.sampled_from(["user", "answer", "call", "result", "result"]),
        st.sampled_from([*IDS, "gone"]),
    ),
    min_size=1,
    max_size=5,
)

steps = st.one_of(
    st.tuples(st.just("append"), batches),
    st.tuples(st.just("turn"), st.sampled_from(IDS), st.booleans(), st.booleans()),
    st.tuples(st.just("turn"), st.sampled_from(IDS), st.just(True), st.booleans()),
    st.tuples(st.just("concurrent"), batches, batches),
    st.tuples(st.just("race"), batches, st.sampled_from(LIMITS)),
    st.tuples(st.just("delete"), st.lists(st.integers(0, 60), min_size=1, max_size=3)),
    st.tuples(st.just("strategy"), st.booleans()),
    st.tuples(st.just("compact"), st.just(None)),
    st.tuples(st.just("compact"), st.just(None)),
)


def _turn(call_id: str, answered: bool) -> list[ContextMessage]:
    out = [
        ContextMessage(role="user", content="q"),
        ContextMessage(role="assistant", tool_calls=[ToolCall(call_id, "t", {"x": 2})]),
    ]
    if answered:
        out.append(ContextMessage(role="tool", tool_call_id=call_id, name="t", content="r"))
    out.append(ContextMessage(role="assistant", content="a"))
    return out


async def _apply(actor: AgentActor, sid: str, step: tuple[Any, ...]) -> None:
    kind = step[0]
    if kind == "append":
        await actor.append_events(sid, [_event(k, i) for k, i in step[1]])
    elif kind == "turn":
        ctx = await actor.build_working_context(sid, limit=7, may_compact=False)
        ctx.add_messages(_turn(step[1], step[2]))
        # A reported prompt size past any budget raises the pressure flag.
        usage = {"prompt_tokens": 10**7} if step[3] else None
        await actor.persist_working_context(sid, ctx, usage=usage)
        # The flag starts a build (that may compact) in the background: let it end.
        await asyncio.gather(*actor.compactions._primers)
    elif kind == "concurrent":
        # Two commits in flight at once (group commit): order and seqs as if sequential.
        await asyncio.gather(
            *(actor.append_events(sid, [_event(k, i) for k, i in b]) for b in step[1:])
        )
    elif kind == "race":
        # The entry evicted (as the least recently used session's is): a window read
        # from the store races with a commit, and must not be kept if it lost the race.
        actor.core._recent._entries.pop(sid, None)
        await asyncio.gather(
            actor.view(sid, step[2]),
            actor.append_events(sid, [_event(k, i) for k, i in step[1]]),
        )
    elif kind == "delete":
        events = await actor.load_events(sid, limit=None)
        ids = [events[k % len(events)].id for k in step[1]] if events else []
        await actor.delete_events(sid, ids)
    elif kind == "strategy":
        await actor.set_strategy(COMPACT if step[1] else None, sid)
    else:
        await actor.compact(sid, strategy=COMPACT)


def _state(view: Any) -> tuple[Any, ...]:
    return (
        [(e.id, e.seq) for e in view.events],
        view.last_seq,
        None if view.record is None else msgspec.to_builtins(view.record),
        view.compaction_required,
        view.strategy,
    )


def _built(ctx: WorkingContext) -> tuple[Any, ...]:
    return (
        msgspec.to_builtins(ctx.messages),
        ctx.system_instructions,
        ctx.base_seq,
        ctx.token_count,
        ctx.omitted_events,
    )


async def _compare(actor: AgentActor, sid: str, where: int) -> None:
    core: Any = actor.core
    warm_views = []
    for limit in LIMITS:
        view = await actor.view(sid, limit)
        # The builder on the cache's messages (its ``clean`` flag, its totals) is the
        # builder as it was before the cache kept them (the oracle).
        record = None if view.record is None else view.record.data
        expected = reference.build_parts(view.events, record)
        assert build_parts(view.events, record, messages=view.messages) == expected, where
        warm_views.append(_state(view))
    warm_builds = [
        _built(await actor.build_working_context(sid, limit=limit, may_compact=False))
        for limit in LIMITS
    ]
    warm_cache, warm_omitted = core._recent, core._omitted
    # Cold: a cache that keeps nothing (cap 0), so every window is the store's as read
    # and every build converts, counts and checks the events itself.
    core._recent, core._omitted = RecentCache(0), {}
    for limit, warm_view, warm_build in zip(LIMITS, warm_views, warm_builds, strict=True):
        cold_view = await actor.view(sid, limit)
        assert cold_view.messages is None or not cold_view.events
        assert _state(cold_view) == warm_view, (where, limit)
        cold = await actor.build_working_context(sid, limit=limit, may_compact=False)
        assert _built(cold) == warm_build, (where, limit)
    core._recent, core._omitted = warm_cache, warm_omitted


async def _run(memory_dir: Path, cap: int, kib: int | None, history: list[tuple[Any, ...]]) -> None:
    async with ActorRegistry(memory_dir, idle_timeout=None, mirror=False) as reg:
        actor = await reg.get("agent")
        # A few events: trims on most commits; ``kib``: a session holds an eighth of it,
        # 0 to 7 of these small events (about 700 bytes each).
        budget = None if kib is None else CacheBudget(kib * 1024)
        actor.core._recent = RecentCache(cap, budget=budget)
        sid = await actor.create_session()
        await _compare(actor, sid, -1)
        for where, step in enumerate(history):
            await _apply(actor, sid, step)
            await _compare(actor, sid, where)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    st.integers(3, 12),
    st.one_of(st.none(), st.integers(3, 40)),
    st.lists(steps, min_size=1, max_size=16),
)
def test_warm_views_and_builds_are_the_cold_ones(
    cap: int, kib: int | None, history: list[tuple[Any, ...]]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(_run(Path(tmp), cap, kib, history))
