"""Group commit: appends that queue while a commit is in flight share one transaction.

The write lock is held to let appends queue up (the way they do behind a commit in
flight); the writer connection's COMMIT statements are counted with SQLite's trace
callback on the real store.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from session_server import ActorRegistry, AgentActor
from session_server.concurrency.eager_tasks import EAGER_TASKS, create_task_eagerly
from session_server.runtime.write_queue import MAX_GROUP_APPENDS
from session_server.values.codec import message_to_event
from session_server.values.context import WorkingContext
from session_server.values.errors import ConflictError, NotFoundError
from session_server.values.events import ContextMessage, ToolCall
from session_server.values.plans import AppendResult
from tests.support.waiting import until


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


async def queued(actor: AgentActor, calls: Sequence[asyncio.Future[Any]]) -> None:
    """Wait until every caller queued its write behind the held lock (or was answered
    without one): the drainer takes jobs from the mailbox only under the lock."""
    await until(
        lambda: actor.queue.queued + sum(call.done() for call in calls) == len(calls),
        "the callers to queue their writes",
    )
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
    await queued(actor, calls)
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
    await queued(actor, [good, stale, unknown, clash, replay, last])
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
    await queued(actor, calls)
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
    await queued(actor, [before, deleted, after])
    actor.write_lock.release()
    assert (await before).seqs == [1, 2, 3, 4]
    assert await deleted is True
    with pytest.raises(NotFoundError):  # queued after the delete: as if sequential
        await after
    # The append, the delete (its text erased from the search index's shard in the same
    # transaction); the refused one: none.
    assert commits == ["COMMIT", "COMMIT"]


async def test_a_group_is_bounded(actor: AgentActor) -> None:
    sid = await actor.create_session(session_id="s")
    commits = await count_commits(actor)
    await warm(actor)
    await actor.write_lock.acquire()
    calls = [
        asyncio.ensure_future(actor.persist_working_context(sid, turn_ctx(n)))
        for n in range(MAX_GROUP_APPENDS + 1)
    ]
    await queued(actor, calls)
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


async def test_a_write_that_never_waits_leaves_the_queue_idle(actor: AgentActor) -> None:
    # A write whose function does not wait (on an open store) is answered, and the queue
    # is idle again after it (on 3.12+ it ran whole in its caller's step, with no task
    # left behind), so the next write starts a drainer of its own.
    sid = await actor.create_session(session_id="s")
    ran: list[int] = []

    async def note(store: object) -> int:
        ran.append(len(ran))
        return len(ran)

    assert await actor.run_write(note) == 1
    assert not actor.pending_writes, "the drainer ended with the mailbox"
    assert await actor.run_write(note) == 2
    # And the queue still groups and answers appends after it.
    assert (await actor.persist_working_context(sid, turn_ctx(1))).seqs == [1, 2, 3, 4]


async def test_a_sequential_turn_reaches_the_writer_in_its_callers_step_with_eager_tasks(
    actor: AgentActor,
) -> None:
    # Where asyncio has eager tasks (3.12+), the caller's first step and the drainer's
    # run inside the call that starts the caller, and post the transaction to the writer
    # thread: nothing waits for a later loop iteration. On 3.11 both are plain tasks,
    # and nothing has run yet when the call returns.
    sid = await actor.create_session(session_id="s")
    await warm(actor)
    started: list[str] = []
    (await actor.store()).writer.set_trace_callback(
        lambda sql: started.append(sql) if sql.startswith("BEGIN") else None
    )
    call = create_task_eagerly(
        asyncio.get_running_loop(), actor.persist_working_context(sid, turn_ctx(1))
    )
    assert actor.queue.queued == 0, "the drainer took the turn (3.12+), or none was queued"
    assert bool(actor.pending_writes) is EAGER_TASKS, "the drainer waits for the writer"
    assert (await call).seqs == [1, 2, 3, 4]
    assert started, "the transaction ran"


async def test_each_commits_effects_run_in_commit_order_before_its_answer(
    actor: AgentActor,
) -> None:
    # The write lock is held across the store's await, so the effects of a group's
    # commits (here: what subscribers see) run after it in commit order, and each
    # caller is answered only after its own commit's effects ran: a single turn, a
    # group, and a refused single turn (answered by its error alone, no effect).
    sid = await actor.create_session(session_id="s")
    await warm(actor)
    log: list[tuple[str, list[int]]] = []
    actor.subscribe(sid, lambda events: log.append(("effect", [e.seq for e in events])))

    def answered(call: asyncio.Future[AppendResult]) -> None:
        if not call.cancelled() and call.exception() is None:
            log.append(("answer", call.result().seqs))

    async def persist(n: int) -> AppendResult:
        call = asyncio.ensure_future(actor.persist_working_context(sid, turn_ctx(n)))
        call.add_done_callback(answered)
        return await call

    assert (await persist(1)).seqs == [1, 2, 3, 4]
    await actor.write_lock.acquire()
    calls = [asyncio.ensure_future(persist(n)) for n in (2, 3)]
    await queued(actor, calls)
    actor.write_lock.release()
    assert [r.seqs for r in await asyncio.gather(*calls)] == [[5, 6, 7, 8], [9, 10, 11, 12]]
    taken = message_to_event(sid, ContextMessage(role="user", content="taken id"))
    await actor.append_events(sid, [taken])
    with pytest.raises(ConflictError, match="already exists"):  # refused in the transaction
        await actor.append_events(sid, [taken])
    assert (await persist(4)).seqs == [14, 15, 16, 17]
    effects = [seqs for kind, seqs in log if kind == "effect"]
    assert effects == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13], [14, 15, 16, 17]]
    for i, (kind, seqs) in enumerate(log):
        if kind == "answer":
            assert ("effect", seqs) in log[:i], f"answer {seqs} before its effects"
    assert not actor.write_lock.locked()


async def test_a_drainer_cancelled_at_once_releases_the_queue(actor: AgentActor) -> None:
    # Found in review: a drainer task cancelled in the step that made it (a loop that
    # cancels every task at shutdown) kept the write lock and stranded later writes. On
    # 3.11 the drainer is a plain task, cancelled here before it ran a step (its
    # coroutine never runs, not even its ``finally``); on 3.12+ it ran its first step in
    # the caller's and is cancelled where it waits. Either way the caller is cancelled,
    # the lock is free and the next write runs.
    await actor.create_session(session_id="s")
    loop = asyncio.get_running_loop()

    async def forever(store: object) -> None:
        await asyncio.Event().wait()

    cancelled: list[asyncio.Task[Any]] = []

    def cancel_drainers() -> None:
        cancelled.extend(actor.pending_writes)
        for task in cancelled:
            task.cancel()

    call = asyncio.ensure_future(actor.run_write(forever))
    # Callbacks run in the order they were scheduled: the caller's step (which queues
    # the write and creates the drainer) first, then this, then the drainer's own step.
    loop.call_soon(cancel_drainers)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(call, timeout=30)  # a guard against the hang only
    assert len(cancelled) == 1, "the caller's step made one drainer"
    await asyncio.gather(*cancelled, return_exceptions=True)
    assert all(task.cancelled() for task in cancelled)
    assert not actor.write_lock.locked() and not actor.pending_writes
    assert actor.queue.queued == 0

    async def quick(store: object) -> str:
        return "quick"

    assert await asyncio.wait_for(actor.run_write(quick), timeout=30) == "quick"
