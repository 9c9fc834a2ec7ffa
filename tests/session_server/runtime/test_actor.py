"""Actor semantics: atomic turns, retries, conflicts, concurrency, cancellation, contexts."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from session_server import ActorRegistry, AgentActor
from session_server.values.codec import message_to_event
from session_server.values.context import WorkingContext
from session_server.values.errors import ConflictError, InvalidParamsError, NotFoundError
from session_server.values.events import ContextMessage, SessionEvent, ToolCall
from session_server.values.turns import assign_turns
from tests.support.waiting import until


def turn(n: int, ctx: WorkingContext) -> None:
    """Add a four-message tool turn to ``ctx``."""
    ctx.add_message(ContextMessage(role="user", content=f"question {n}"))
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
async def actor(tmp_path: Path) -> AsyncIterator[AgentActor]:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        yield await reg.get("agent")


@pytest.mark.parametrize("session_id", [".", "x\x00y", "a/b", "line\nbreak", "x" * 200])
async def test_deleting_an_unmirrorable_session_id_is_quiet(
    actor: AgentActor, session_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Found by the fault suite's fuzzer: session.delete with an id that cannot name a
    # folder scheduled a mirror delete that failed with a logged traceback.
    await actor.create_session(session_id="kept")
    assert await actor.delete_session(session_id) is False
    await actor.mirror.drain()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert [s["id"] for s in await actor.list_sessions()] == ["kept"]


async def test_persist_writes_exactly_the_new_messages(actor: AgentActor) -> None:
    sid = await actor.create_session()
    ctx = await actor.build_working_context(sid)
    turn(1, ctx)
    result = await actor.persist_working_context(sid, ctx)
    assert result.seqs == [1, 2, 3, 4]
    ctx2 = await actor.build_working_context(sid, system_instructions=["be brief"])
    assert ctx2.base_seq == 4
    assert ctx2.system_instructions == ["be brief"]
    assert [m.role for m in ctx2.messages] == ["user", "assistant", "tool", "assistant"]
    assert ctx2.get_new_messages() == []
    turn(2, ctx2)
    result2 = await actor.persist_working_context(sid, ctx2)
    assert result2.seqs == [5, 6, 7, 8]
    events = await actor.load_events(sid)
    assert [e.content for e in events if e.action == "user_message"] == ["question 1", "question 2"]
    assert events[1].tool_calls == [ToolCall(id="call-1", name="lookup", arguments={"n": 1})]
    assert events[2].tool_name == "lookup" and events[2].tool_call_id == "call-1"


async def test_idempotency_key_returns_first_result_without_writing(actor: AgentActor) -> None:
    sid = await actor.create_session()
    ctx = await actor.build_working_context(sid)
    turn(1, ctx)
    first = await actor.persist_working_context(sid, ctx, idempotency_key="turn-1")
    again = await actor.persist_working_context(sid, ctx, idempotency_key="turn-1")
    assert again == first
    assert len(await actor.load_events(sid)) == 4
    # the same key on append_events is also a replay
    ev = message_to_event(sid, ContextMessage(role="user", content="x"))
    r1 = await actor.append_events(sid, [ev], idempotency_key="k")
    r2 = await actor.append_events(sid, [ev], idempotency_key="k")
    assert r1 == r2 and r1.seqs == [5]
    assert len(await actor.load_events(sid)) == 5


async def test_expected_last_seq_conflict_writes_nothing(actor: AgentActor) -> None:
    sid = await actor.create_session()
    await actor.append_events(sid, [message_to_event(sid, ContextMessage(role="user"))])
    with pytest.raises(ConflictError) as info:
        await actor.append_events(
            sid, [message_to_event(sid, ContextMessage(role="user"))], expected_last_seq=0
        )
    assert info.value.data is not None and info.value.data["last_seq"] == 1
    assert info.value.code == -32002
    ok = await actor.append_events(
        sid, [message_to_event(sid, ContextMessage(role="user"))], expected_last_seq=1
    )
    assert ok.seqs == [2]


async def test_on_conflict_reject_uses_base_seq(actor: AgentActor) -> None:
    sid = await actor.create_session()
    stale = await actor.build_working_context(sid)
    fresh = await actor.build_working_context(sid)
    turn(1, fresh)
    await actor.persist_working_context(sid, fresh, on_conflict="reject")
    turn(2, stale)
    with pytest.raises(ConflictError) as info:
        await actor.persist_working_context(sid, stale, on_conflict="reject")
    assert info.value.data == {"last_seq": 4, "field": "expected_last_seq"}
    assert len(await actor.load_events(sid)) == 4
    # "append" (the default) appends after whatever is there
    assert (await actor.persist_working_context(sid, stale)).seqs == [5, 6, 7, 8]
    with pytest.raises(InvalidParamsError, match="on_conflict"):
        await actor.persist_working_context(sid, stale, on_conflict="merge")  # type: ignore[arg-type]


async def test_persist_refuses_invalid_messages_and_writes_nothing(actor: AgentActor) -> None:
    sid = await actor.create_session()
    ctx = await actor.build_working_context(sid)
    ctx.add_message(ContextMessage(role="user", content="fine"))
    ctx.add_message(ContextMessage(role="tool", content="no call id"))
    with pytest.raises(InvalidParamsError, match=r"messages\[1\]\.tool_call_id"):
        await actor.persist_working_context(sid, ctx)
    bad_role = await actor.build_working_context(sid)
    bad_role.add_message(ContextMessage(role="wizard", content="x"))  # type: ignore[arg-type]
    with pytest.raises(InvalidParamsError, match=r"messages\[0\]\.role"):
        await actor.persist_working_context(sid, bad_role)
    for value in (5, None, ("user", "x")):  # a local caller passes anything
        wrong = await actor.build_working_context(sid)
        wrong.messages.append(value)  # type: ignore[arg-type]
        with pytest.raises(InvalidParamsError, match=r"messages\[0\]: must be an object"):
            await actor.persist_working_context(sid, wrong)
    assert await actor.load_events(sid) == []
    good = WorkingContext()
    good.add_message(ContextMessage(role="user", content="fine"))
    with pytest.raises(NotFoundError):
        await actor.persist_working_context("missing", good)


async def test_fifty_concurrent_appenders_get_contiguous_seqs(actor: AgentActor) -> None:
    sid = await actor.create_session()

    async def one(i: int) -> list[int]:
        ctx = await actor.build_working_context(sid, limit=4)
        turn(i, ctx)
        return (await actor.persist_working_context(sid, ctx)).seqs

    results = await asyncio.gather(*(one(i) for i in range(50)))
    seqs = sorted(s for r in results for s in r)
    assert seqs == list(range(1, 201))
    for r in results:  # each turn is contiguous: no interleaving inside a write
        assert r == list(range(r[0], r[0] + 4))
    events = await actor.load_events(sid, limit=None, tail=False)
    for i in range(0, 200, 4):
        n = events[i].content.split()[-1]
        assert [e.action for e in events[i : i + 4]] == [
            "user_message",
            "tool_call_request",
            "tool_result",
            "agent_message",
        ]
        assert events[i + 3].content == f"answer {n}"


async def test_write_completes_when_caller_is_cancelled(actor: AgentActor) -> None:
    sid = await actor.create_session()
    # Hold the mailbox so the write is queued, then cancel its caller once it has started.
    await actor.write_lock.acquire()
    ctx = await actor.build_working_context(sid)
    turn(1, ctx)
    caller = asyncio.ensure_future(actor.persist_working_context(sid, ctx))
    await until(lambda: actor.queue.queued == 1, "the caller to queue its write")
    assert actor.pending_writes, "the write task should be queued behind the held lock"
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    actor.write_lock.release()
    await asyncio.gather(*actor.pending_writes)
    assert len(await actor.load_events(sid)) == 4


async def test_reads_do_not_wait_for_the_write_lock(actor: AgentActor) -> None:
    sid = await actor.create_session()
    ctx = await actor.build_working_context(sid)
    turn(1, ctx)
    await actor.persist_working_context(sid, ctx)
    async with actor.write_lock:  # a write is "in progress"
        events = await asyncio.wait_for(actor.load_events(sid), timeout=10)
        built = await asyncio.wait_for(actor.build_working_context(sid), timeout=10)
    assert len(events) == 4 and built.base_seq == 4


async def test_reads_see_a_whole_write_or_none_of_it(actor: AgentActor) -> None:
    sid = await actor.create_session()
    big = [message_to_event(sid, ContextMessage(role="user", content=str(i))) for i in range(3000)]
    writing = asyncio.ensure_future(actor.append_events(sid, big))
    seen: list[int] = []
    while not writing.done():
        seen.append(len(await actor.load_events(sid, limit=None)))
    await writing
    assert set(seen) <= {0, 3000}
    assert len(await actor.load_events(sid, limit=None)) == 3000


async def test_context_window_keeps_tool_pairs_and_counts_tokens(actor: AgentActor) -> None:
    sid = await actor.create_session()
    ctx = await actor.build_working_context(sid)
    for n in range(1, 4):
        turn(n, ctx)
    await actor.persist_working_context(sid, ctx)
    # limit 2 would start at a tool result: the window moves to the turn boundary
    built = await actor.build_working_context(sid, limit=2)
    assert [m.role for m in built.messages] == ["user", "assistant", "tool", "assistant"]
    assert built.messages[0].content == "question 3"
    # limit 5 starts at "answer 2": it splits no pair, so it stays
    built5 = await actor.build_working_context(sid, limit=5)
    assert built5.messages[0].content == "answer 2"
    events = await actor.load_events(sid)
    stored_tokens = sum(e.token_count or 0 for e in events[-5:])
    assert built5.token_count == stored_tokens
    with_system = await actor.build_working_context(sid, limit=5, system_instructions=["x y z"])
    assert with_system.token_count is not None and with_system.token_count > stored_tokens
    with pytest.raises(InvalidParamsError, match="limit"):
        await actor.build_working_context(sid, limit=0)
    with pytest.raises(NotFoundError):
        await actor.build_working_context("missing")


async def test_window_widens_to_the_call_of_a_late_result(actor: AgentActor) -> None:
    sid = await actor.create_session()
    call = SessionEvent(
        action="tool_call_request", tool_calls=[ToolCall(id="late", name="slow", arguments={})]
    )
    await actor.append_events(sid, [SessionEvent(action="user_message", content="q1"), call])
    await actor.append_events(sid, [SessionEvent(action="user_message", content="q2")])
    await actor.append_events(
        sid, [SessionEvent(action="tool_result", tool_call_id="late", content="ok")]
    )
    # the late result belongs to turn 1; a 2-event window is widened back to that turn,
    # and the result is placed with its call
    built = await actor.build_working_context(sid, limit=2)
    assert [m.role for m in built.messages] == ["user", "assistant", "tool", "user"]
    # with the call out of reach (from_seq cut), the orphan result is dropped, not sent
    store = await actor.store()
    window = await store.context_window(sid, limit=None, from_seq=3)
    assert [e.action for e in window.events] == ["user_message"]


async def test_cached_windows_equal_store_windows(tmp_path: Path) -> None:
    """The in-memory window (recent events) gives exactly what the SQL path gives, and
    the stored turns are the pure rule's, with call ids reused across turns and appends
    (a provider's ``call_1`` every turn), results stored before their call, and crashes."""
    rng = random.Random(1234)
    async with ActorRegistry(tmp_path, idle_timeout=None, context_limit=8) as reg:
        actor = await reg.get("cache")
        store = await actor.store()
        for round_ in range(12):
            sid = await actor.create_session()
            pending: list[str] = []
            for step in range(rng.randint(5, 60)):
                kind = rng.random()
                batch: list[SessionEvent] = []
                if kind < 0.3:
                    batch.append(SessionEvent(action="user_message", content=f"u{step}"))
                elif kind < 0.55:
                    ids = [f"{round_}-{step}-{i}" for i in range(rng.randint(1, 3))]
                    if rng.random() < 0.4:  # a reused id; some never get a result (a crash)
                        ids[0] = rng.choice(["call_1", "call_2"])
                    calls = [ToolCall(id=i, name="t", arguments={}) for i in ids]
                    batch.append(SessionEvent(action="tool_call_request", tool_calls=calls))
                    pending.extend(ids)
                elif kind < 0.6:  # a result stored before its call (or with none at all)
                    call_id = rng.choice(["call_1", "call_2"])
                    batch.append(SessionEvent(action="tool_result", tool_call_id=call_id))
                elif kind < 0.85 and pending:
                    call_id = pending.pop(rng.randrange(len(pending)))  # late results too
                    batch.append(SessionEvent(action="tool_result", tool_call_id=call_id))
                else:
                    batch.append(SessionEvent(action="agent_message", content=f"a{step}"))
                await actor.append_events(sid, batch)
                if rng.random() < 0.3:
                    limit = rng.randint(1, 12)
                    view = await actor.view(sid, limit)
                    fresh = await store.context_window(sid, limit=limit, from_record=True)
                    assert [e.seq for e in view.events] == [e.seq for e in fresh.events], (
                        round_,
                        limit,
                    )
                    assert view.last_seq == fresh.state.last_seq
                    assert actor.core.cached_view(sid, limit) is not None
            stored = await actor.load_events(sid, limit=None)
            assert [e.turn for e in stored] == assign_turns(stored)[0], round_


async def test_persisting_nothing(actor: AgentActor) -> None:
    sid = await actor.create_session()
    stale = await actor.build_working_context(sid)
    ctx = await actor.build_working_context(sid)
    turn(1, ctx)
    await actor.persist_working_context(sid, ctx)
    assert (await actor.persist_working_context(sid, stale)).seqs == []
    with pytest.raises(ConflictError) as info:
        await actor.persist_working_context(sid, stale, on_conflict="reject")
    assert info.value.data is not None and info.value.data["last_seq"] == 4
    with pytest.raises(NotFoundError):
        await actor.persist_working_context("missing", WorkingContext())
    with pytest.raises(NotFoundError):
        await actor.persist_working_context("missing", WorkingContext(), on_conflict="reject")


async def test_persists_without_builds_follow_strategy_changes_and_deletes(
    tmp_path: Path,
) -> None:
    """A client that only persists (no build through the server, and no mirror snapshot
    to render: no cached window): the session's strategy is remembered after the first
    turn, and a strategy set or a delete since is what the next turn sees."""
    async with ActorRegistry(tmp_path, idle_timeout=None, mirror=False) as reg:
        await _persists_without_builds(await reg.get("agent"))


async def _persists_without_builds(actor: AgentActor) -> None:
    sid = await actor.create_session()
    usage = {"prompt_tokens": 50_000}  # a quarter of the default budget: no pressure
    for n in range(3):
        ctx = WorkingContext()
        turn(n, ctx)
        result = await actor.persist_working_context(sid, ctx, usage=usage)
        assert result.compaction_required is False
    assert actor.core.cached_view(sid, actor.context_limit) is None  # nothing was built
    await actor.set_strategy({"mode": "compact", "max_context_tokens": 20_000}, sid)
    ctx = WorkingContext()
    turn(3, ctx)
    result = await actor.persist_working_context(sid, ctx, usage=usage)
    assert result.compaction_required is True  # the strategy set since the last turn
    await actor.set_strategy(None, sid)
    await actor.delete_session(sid)
    ctx = WorkingContext()
    turn(4, ctx)
    with pytest.raises(NotFoundError):
        await actor.persist_working_context(sid, ctx, usage=usage)
