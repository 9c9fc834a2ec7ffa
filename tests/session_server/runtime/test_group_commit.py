"""Group commit: appends that queue while a commit is in flight share one transaction.

The write lock is held to let appends queue up (the way they do behind a commit in
flight); the writer connection's COMMIT statements are counted with SQLite's trace
callback on the real store.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from session_server import ActorRegistry, AgentActor
from session_server.core.codec import message_to_event
from session_server.core.context import WorkingContext
from session_server.core.errors import ConflictError, NotFoundError
from session_server.core.events import ContextMessage, ToolCall
from session_server.core.plans import AppendResult
from session_server.runtime.actor import MAX_GROUP_APPENDS


def turn_ctx(n: int, base_seq: int = 0) -> WorkingContext:
    ctx = WorkingContext(base_seq=base_seq)
    ctx.add_messages(
        [
            ContextMessage(role="user", content=f"question {n}"),
            ContextMessage(role="assistant", tool_calls=[ToolCall(id=f"call-{n}", name="lookup")]),
            ContextMessage(role="tool", tool_call_id=f"call-{n}", name="lookup", content="r"),
            ContextMessage(role="assistant", content=f"answer {n}"),
        ]
    )
    return ctx


@pytest.fixture
async def actor(tmp_path: Path) -> AsyncIterator[AgentActor]:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        yield await reg.get("agent")


async def count_commits(actor: AgentActor) -> list[str]:
    """COMMIT statements of the agent's writer connection, from now on."""
    commits: list[str] = []
    (await actor.store()).writer.set_trace_callback(
        lambda sql: commits.append(sql) if sql == "COMMIT" else None
    )
    return commits


async def warm(actor: AgentActor) -> None:
    """Build each session once, so a persist plans from the cache (its pressure check
    reads nothing) and goes straight to the mailbox."""
    for session in await actor.list_sessions():
        await actor.build_working_context(session["id"])


async def queued(actor: AgentActor) -> None:
    """Let the callers run up to their queued write (one loop step each is enough)."""
    for _ in range(3):
        await asyncio.sleep(0)
    assert actor.pending_writes, "the writes should wait behind the held lock"


async def test_queued_turns_commit_together_in_order(actor: AgentActor) -> None:
    sids = [await actor.create_session(session_id=f"s{i}") for i in range(3)]
    commits = await count_commits(actor)
    await warm(actor)
    await actor.write_lock.acquire()
    calls = [
        asyncio.ensure_future(actor.persist_working_context(sids[n % 3], turn_ctx(n)))
        for n in range(9)
    ]
    await queued(actor)
    actor.write_lock.release()
    results = await asyncio.gather(*calls)
    assert commits == ["COMMIT"], "one transaction for the nine turns"
    # Seqs exactly as one after the other, per session, in the order of the calls.
    for n, result in enumerate(results):
        k = n // 3
        assert result.seqs == list(range(4 * k + 1, 4 * k + 5)), (n, result)
    for i, sid in enumerate(sids):
        events = await actor.load_events(sid, limit=None, tail=False)
        assert [e.content for e in events[3::4]] == [f"answer {n}" for n in (i, i + 3, i + 6)]
        assert [e.turn for e in events] == [1] * 4 + [2] * 4 + [3] * 4


async def test_a_refused_turn_in_a_group_fails_alone(actor: AgentActor) -> None:
    sid = await actor.create_session(session_id="s")
    first = await actor.persist_working_context(sid, turn_ctx(0), idempotency_key="k0")
    taken = message_to_event(sid, ContextMessage(role="user", content="taken id"))
    await actor.append_events(sid, [taken])
    commits = await count_commits(actor)
    await warm(actor)
    await actor.write_lock.acquire()
    good = asyncio.ensure_future(actor.persist_working_context(sid, turn_ctx(1)))
    # base_seq 0 with on_conflict="reject": the session moved on, a conflict.
    stale = asyncio.ensure_future(
        actor.persist_working_context(sid, turn_ctx(2), on_conflict="reject")
    )
    unknown = asyncio.ensure_future(actor.persist_working_context("nope", turn_ctx(3)))
    # An event id that exists already: refused by the store inside the transaction.
    clash = asyncio.ensure_future(actor.append_events(sid, [taken]))
    replay = asyncio.ensure_future(
        actor.persist_working_context(sid, turn_ctx(0), idempotency_key="k0")
    )
    last = asyncio.ensure_future(actor.persist_working_context(sid, turn_ctx(4)))
    await queued(actor)
    actor.write_lock.release()
    outcomes = await asyncio.gather(
        good, stale, unknown, clash, replay, last, return_exceptions=True
    )
    assert commits == ["COMMIT"]
    ok1, conflict, missing, duplicate, replayed, ok2 = outcomes
    assert isinstance(conflict, ConflictError) and conflict.data["last_seq"] == 9
    assert isinstance(missing, NotFoundError)
    assert isinstance(duplicate, ConflictError)
    assert replayed == first  # the first answer, nothing written again
    # The neighbours of the refused turns committed, with the seqs of one after the other.
    assert isinstance(ok1, AppendResult) and ok1.seqs == [6, 7, 8, 9]
    assert isinstance(ok2, AppendResult) and ok2.seqs == [10, 11, 12, 13]
    events = await actor.load_events(sid, limit=None, tail=False)
    assert [e.seq for e in events] == list(range(1, 14))
    assert [e.content for e in events if e.action == "agent_message"] == [
        "answer 0",
        "answer 1",
        "answer 4",
    ]


async def test_a_cancelled_caller_in_a_group_leaves_its_neighbours_answered(
    actor: AgentActor,
) -> None:
    sid = await actor.create_session(session_id="s")
    await warm(actor)
    await actor.write_lock.acquire()
    calls = [
        asyncio.ensure_future(actor.persist_working_context(sid, turn_ctx(n))) for n in range(3)
    ]
    await queued(actor)
    calls[1].cancel()
    actor.write_lock.release()
    with pytest.raises(asyncio.CancelledError):
        await calls[1]
    assert (await calls[0]).seqs == [1, 2, 3, 4]
    assert (await calls[2]).seqs == [9, 10, 11, 12]
    await asyncio.gather(*actor.pending_writes)
    # A queued write completes even when its caller left: the middle turn is there, whole.
    events = await actor.load_events(sid, limit=None, tail=False)
    assert [e.content for e in events if e.action == "agent_message"] == [
        "answer 0",
        "answer 1",
        "answer 2",
    ]


async def test_other_writes_keep_their_place_between_groups(actor: AgentActor) -> None:
    sid = await actor.create_session(session_id="s")
    commits = await count_commits(actor)
    await warm(actor)
    await actor.write_lock.acquire()
    before = asyncio.ensure_future(actor.persist_working_context(sid, turn_ctx(1)))
    deleted = asyncio.ensure_future(actor.delete_session(sid))
    after = asyncio.ensure_future(actor.persist_working_context(sid, turn_ctx(2)))
    await queued(actor)
    actor.write_lock.release()
    assert (await before).seqs == [1, 2, 3, 4]
    assert await deleted is True
    with pytest.raises(NotFoundError):  # queued after the delete: as if sequential
        await after
    assert commits == ["COMMIT", "COMMIT"]  # the append, the delete; the refused one: none


async def test_a_group_is_bounded(actor: AgentActor) -> None:
    sid = await actor.create_session(session_id="s")
    commits = await count_commits(actor)
    await warm(actor)
    await actor.write_lock.acquire()
    calls = [
        asyncio.ensure_future(actor.persist_working_context(sid, turn_ctx(n)))
        for n in range(MAX_GROUP_APPENDS + 1)
    ]
    await queued(actor)
    actor.write_lock.release()
    results = await asyncio.gather(*calls)
    assert len(commits) == 2
    assert [r.last_seq for r in results] == [4 * (n + 1) for n in range(MAX_GROUP_APPENDS + 1)]


async def test_a_write_queued_as_the_mailbox_empties_is_not_lost(actor: AgentActor) -> None:
    # Found by the load test: a write queued by a task that ran after the drainer's last
    # step but before its done callbacks was left in the mailbox (its caller never
    # answered). A subscriber starts such a task from inside the drainer's last step.
    sid = await actor.create_session(session_id="s")
    late: list[asyncio.Future[AppendResult]] = []

    def on_events(events: object) -> None:
        if not late:
            late.append(asyncio.ensure_future(actor.persist_working_context(sid, turn_ctx(2))))

    unsubscribe = actor.subscribe(sid, on_events)
    assert (await actor.persist_working_context(sid, turn_ctx(1))).seqs == [1, 2, 3, 4]
    unsubscribe()
    # A guard against the hang, not a synchronisation: the write is answered at once.
    assert (await asyncio.wait_for(late[0], timeout=30)).seqs == [5, 6, 7, 8]


async def test_a_write_that_never_waits_drains_in_its_callers_step(actor: AgentActor) -> None:
    # The drainer starts eagerly: a write whose function does not wait (on an open store)
    # runs whole inside ``run_write``'s step, and the queue is idle again after it, so
    # the next write starts a drainer of its own.
    sid = await actor.create_session(session_id="s")
    ran: list[int] = []

    async def note(store: object) -> int:
        ran.append(len(ran))
        return len(ran)

    call = actor.run_write(note)
    assert await call == 1
    assert not actor.pending_writes, "no task was needed"
    assert await actor.run_write(note) == 2
    # And the queue still groups and answers appends after it.
    assert (await actor.persist_working_context(sid, turn_ctx(1))).seqs == [1, 2, 3, 4]


async def test_a_sequential_turn_reaches_the_writer_in_its_callers_step(
    actor: AgentActor,
) -> None:
    sid = await actor.create_session(session_id="s")
    await warm(actor)
    started: list[str] = []
    (await actor.store()).writer.set_trace_callback(
        lambda sql: started.append(sql) if sql.startswith("BEGIN") else None
    )
    call = asyncio.ensure_future(actor.persist_working_context(sid, turn_ctx(1)))
    # One loop step runs the caller; the drainer's first step runs inside it and posts
    # the transaction to the writer thread, with no further hand-over.
    await asyncio.sleep(0)
    assert actor.queue.queued == 0, "the drainer took the turn in the caller's step"
    assert actor.pending_writes, "and now waits for the writer thread"
    assert (await call).seqs == [1, 2, 3, 4]
    assert started, "the transaction ran"


async def test_callers_are_answered_in_the_step_that_learns_of_the_commit(
    actor: AgentActor,
) -> None:
    # The group's answers go out from the callback that learns the transaction ended
    # (``append_group(then=)``), so a caller resumes before the drainer's own next
    # step: it finds the drainer still there, holding the write lock.
    sid = await actor.create_session(session_id="s")
    await warm(actor)
    result = await actor.persist_working_context(sid, turn_ctx(1))
    assert result.seqs == [1, 2, 3, 4]
    assert actor.pending_writes and actor.write_lock.locked()
    # The same for a group, and for a refused single turn (answered after the drainer
    # resumed, through the return value: its error is the only outcome).
    await actor.write_lock.acquire()
    calls = [asyncio.ensure_future(actor.persist_working_context(sid, turn_ctx(n))) for n in (2, 3)]
    await queued(actor)
    actor.write_lock.release()
    assert [r.seqs for r in await asyncio.gather(*calls)] == [[5, 6, 7, 8], [9, 10, 11, 12]]
    taken = message_to_event(sid, ContextMessage(role="user", content="taken id"))
    await actor.append_events(sid, [taken])
    with pytest.raises(ConflictError, match="already exists"):  # refused in the transaction
        await actor.append_events(sid, [taken])
    assert (await actor.load_events(sid, limit=1)).pop().seq == 13
    assert (await actor.persist_working_context(sid, turn_ctx(4))).seqs == [14, 15, 16, 17]


async def test_a_drainer_cancelled_before_its_first_step_releases_the_queue(
    actor: AgentActor,
) -> None:
    # Found in review: a drainer task cancelled in the step that made it (a loop that
    # cancels every task at shutdown) kept the write lock and stranded later writes.
    await actor.create_session(session_id="s")

    async def forever(store: object) -> None:
        await asyncio.Event().wait()

    call = asyncio.ensure_future(actor.run_write(forever))
    await asyncio.sleep(0)  # the caller's step: the drainer took the write and waits
    drainers = list(actor.pending_writes)
    assert len(drainers) == 1 and actor.write_lock.locked()
    drainers[0].cancel()  # before the drainer's task ran a step of its own
    with pytest.raises(asyncio.CancelledError):
        await call
    await asyncio.gather(*drainers, return_exceptions=True)
    assert not actor.write_lock.locked() and not actor.pending_writes

    async def quick(store: object) -> str:
        return "quick"

    assert await asyncio.wait_for(actor.run_write(quick), timeout=30) == "quick"
