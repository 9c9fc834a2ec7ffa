"""``WriteQueue``: an actor's mailbox of writes, drained in order with group commit (I/O shell).

Every write of an agent goes through the mailbox, a FIFO that one task drains under the
write lock, so writes never interleave and seqs come out contiguous. Once queued a write
completes (committed or rolled back) even when its caller is cancelled or disconnects:
the caller awaits only its answer (the job's future, which a cancelled caller cancels),
while the job itself stays in the mailbox until the drainer ran it (``settled``). This
is ``asyncio.shield`` without its second future and the extra loop step per answer.

Group commit: the appends that queue up while a commit is in flight go together into the
next transaction (the ``commit_group`` the owner gives); any other write runs alone, in
its place in the queue.

The drainer is started with ``create_task_eagerly``: on Python 3.12+ the queue's first job
runs up to its first wait (for a commit, the hand-over to the writer thread) in the step
of the call that queued it; on 3.11 the drainer is a plain task. The queue is correct
either way: jobs run in the order they were queued, and a drainer cancelled before it
ran a step (possible only for a plain task) leaves the queue idle, its jobs cancelled.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Final, TypeVar

from ..concurrency.eager_tasks import create_task_eagerly
from ..core.decisions import AppendPlan
from ..storage.store import AgentStore
from ..values.plans import AppendResult

__all__ = [
    "MAX_GROUP_APPENDS",
    "MAX_GROUP_EVENTS",
    "Activity",
    "AppendJob",
    "WriteJob",
    "WriteQueue",
]

# The actor's logger: these records were the actor's before the queue had its own module.
log = logging.getLogger("session_server.runtime.actor")

T = TypeVar("T")
# Gives the open store for a write, counted as activity in flight (``AgentActor``).
Activity = Callable[[], AbstractAsyncContextManager[AgentStore]]

# A group commit holds at most this many appends and events (at least one append), so
# its transaction, and the wait of its last caller, stay bounded.
MAX_GROUP_APPENDS: Final = 64
MAX_GROUP_EVENTS: Final = 2048


class _Job:
    """A queued write and its caller's answer.

    ``future`` is what the caller awaits; cancelling the caller cancels it, never the
    job. ``settled`` says the queue is done with the job (answered, failed or given up):
    a job whose caller left still runs, and its outcome is dropped (an error is logged).
    """

    __slots__ = ("future", "settled")

    # Set by each kind's ``__init__`` (one call per job, no ``super()`` chain).
    future: asyncio.Future[Any]
    settled: bool

    def resolve(self, result: Any) -> None:
        """Done: answer ``result`` (unless the caller left)."""
        self.settled = True
        if not self.future.done():
            self.future.set_result(result)

    def fail(self, exc: BaseException) -> None:
        """Done with ``exc``: the caller gets it (a ``CancelledError`` cancels the answer)."""
        self.settled = True
        if self.future.done():
            # The caller left: nobody takes the error, say it here.
            if not isinstance(exc, asyncio.CancelledError):
                log.debug("write failed: %r", exc)
        elif isinstance(exc, asyncio.CancelledError):
            self.future.cancel()
        else:
            self.future.set_exception(exc)


class WriteJob(_Job):
    """A write that runs alone in its place in the mailbox: ``fn(store)``."""

    __slots__ = ("fn",)

    def __init__(
        self, fn: Callable[[AgentStore], Awaitable[Any]], future: asyncio.Future[Any]
    ) -> None:
        self.future = future
        self.settled = False
        self.fn = fn


class AppendJob(_Job):
    """An append plan waiting for its group commit."""

    __slots__ = ("plan",)

    def __init__(self, plan: AppendPlan, future: asyncio.Future[AppendResult]) -> None:
        self.future = future
        self.settled = False
        self.plan = plan


class WriteQueue:
    """The mailbox: ``write`` and ``commit`` queue, one drainer task runs them in order.

    ``lock`` is held around each write (or group); ``commit_group`` runs a group of
    appends in one transaction and answers each job's future. ``activity`` (given with
    each job) gives the open store for a write and counts it as activity in flight; the
    queue keeps it only while its drainer runs, so it holds no reference back to its
    actor (a dropped actor is freed at once, without waiting for the cycle collector).
    """

    def __init__(
        self,
        lock: asyncio.Lock,
        commit_group: Callable[[AgentStore, list[AppendJob]], Awaitable[None]],
    ) -> None:
        self._lock = lock
        self._commit_group = commit_group
        self._mailbox: deque[WriteJob | AppendJob] = deque()
        # ``_draining`` from the drainer's start (its first step runs in ``_enqueue``)
        # to its last step; ``_drainer`` is its task once it waited.
        self._draining = False
        self._drainer: asyncio.Task[None] | None = None
        # The drainer while it runs (it survives the callers).
        self.pending: set[asyncio.Task[Any]] = set()

    @property
    def queued(self) -> int:
        """Jobs in the mailbox that no drainer took yet."""
        return len(self._mailbox)

    async def write(self, fn: Callable[[AgentStore], Awaitable[T]], activity: Activity) -> T:
        """Queue ``fn(store)``: it runs alone under the write lock, in queue order, and
        completes even when the caller is cancelled."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._enqueue(loop, WriteJob(fn, future), activity)
        return await future

    async def commit(self, plan: AppendPlan, activity: Activity) -> AppendResult:
        """Queue an append plan for the next group commit; its answer after the commit."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[AppendResult] = loop.create_future()
        self._enqueue(loop, AppendJob(plan, future), activity)
        return await future

    def _enqueue(
        self, loop: asyncio.AbstractEventLoop, job: WriteJob | AppendJob, activity: Activity
    ) -> None:
        self._mailbox.append(job)
        if self._draining:
            return
        # Started eagerly where asyncio can: the write begins in this step, not the
        # loop's next one (a sequential turn's commit reaches the writer thread one
        # hand-over sooner).
        self._draining = True
        task = create_task_eagerly(loop, self._drain(activity))
        if not task.done():  # it waits, or has not run yet: the task runs the rest
            self._drainer = task
            self.pending.add(task)
            task.add_done_callback(self._drainer_done)

    async def _drain(self, activity: Activity) -> None:
        """Run the mailbox in order: a write alone, consecutive appends as one group."""
        try:
            while self._mailbox:
                async with self._lock:
                    # Taken under the lock: appends that queued while it was held join in.
                    nxt = self._next_jobs()
                    jobs: list[WriteJob] | list[AppendJob] = (
                        [nxt] if isinstance(nxt, WriteJob) else nxt
                    )
                    try:
                        async with activity() as store:
                            if isinstance(nxt, WriteJob):
                                nxt.resolve(await nxt.fn(store))
                            else:
                                await self._commit_group(store, nxt)
                    except BaseException as exc:
                        for job in jobs:
                            if not job.settled:
                                job.fail(exc)
                        if not isinstance(exc, Exception):
                            raise
        finally:
            # In the drainer's last step, with no await after the check that the mailbox
            # is empty: a job queued from now on starts a new drainer. (A done callback
            # would run too late: a job queued before it would wait forever; and a
            # write's caller answered in this step, which runs next, must find the queue
            # idle.)
            if self._drainer is not None:
                self.pending.discard(self._drainer)
            self._drainer = None
            self._draining = False
            if self._mailbox:  # cancelled (the loop shutting down): so are the jobs left
                for job in self._mailbox:
                    job.fail(asyncio.CancelledError())
                self._mailbox.clear()

    def _drainer_done(self, task: asyncio.Task[None]) -> None:
        """The drainer's task ended. Its last step normally left the queue idle already;
        a task cancelled before its first step never ran ``_drain`` (not even its
        ``finally``), so the queue is made idle here and the jobs it was started for are
        cancelled, as a cancelled drainer's are (none of them ran: the lock was never
        taken)."""
        self.pending.discard(task)
        if self._drainer is not task:
            return
        self._drainer = None
        self._draining = False
        for job in self._mailbox:
            job.fail(asyncio.CancelledError())
        self._mailbox.clear()

    def _next_jobs(self) -> WriteJob | list[AppendJob]:
        """The next write, or the run of appends at the head within the group bounds."""
        first = self._mailbox.popleft()
        if isinstance(first, WriteJob):
            return first
        group = [first]
        events = len(first.plan.batch.events)
        while self._mailbox and len(group) < MAX_GROUP_APPENDS:
            head = self._mailbox[0]
            if not isinstance(head, AppendJob):
                break
            events += len(head.plan.batch.events)
            if events > MAX_GROUP_EVENTS:
                break
            group.append(head)
            self._mailbox.popleft()
        return group
