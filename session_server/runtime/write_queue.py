"""``WriteQueue``: an actor's mailbox of writes, drained in order with group commit (I/O shell).

Every write of an agent goes through the mailbox, a FIFO that one task drains under the
write lock, so writes never interleave and seqs come out contiguous. The caller awaits
its write through ``asyncio.shield``: once queued it completes (committed or rolled back)
even when the caller is cancelled or disconnects.

Group commit: the appends that queue up while a commit is in flight go together into the
next transaction (the ``commit_group`` the owner gives); any other write runs alone, in
its place in the queue.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from ..core.agent_core import AppendPlan
from ..core.plans import AppendResult
from ..storage.store import AgentStore

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


@dataclass(slots=True)
class WriteJob:
    """A write that runs alone in its place in the mailbox: ``fn(store)``."""

    fn: Callable[[AgentStore], Awaitable[Any]]
    future: asyncio.Future[Any]


@dataclass(slots=True)
class AppendJob:
    """An append plan waiting for its group commit."""

    plan: AppendPlan
    future: asyncio.Future[AppendResult]


def _retrieve(future: asyncio.Future[Any]) -> None:
    # Read here so the error of a write whose caller left is not reported as unhandled;
    # a caller still waiting gets it through its shield.
    if not future.cancelled() and future.exception() is not None:
        log.debug("write failed: %r", future.exception())


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
        self._drainer: asyncio.Task[None] | None = None
        # The drainer while it runs (it survives the callers).
        self.pending: set[asyncio.Task[Any]] = set()

    async def write(self, fn: Callable[[AgentStore], Awaitable[T]], activity: Activity) -> T:
        """Queue ``fn(store)``: it runs alone under the write lock, in queue order, and
        completes even when the caller is cancelled."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._enqueue(WriteJob(fn, future), activity)
        return await asyncio.shield(future)

    async def commit(self, plan: AppendPlan, activity: Activity) -> AppendResult:
        """Queue an append plan for the next group commit; its answer after the commit."""
        future: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        self._enqueue(AppendJob(plan, future), activity)
        return await asyncio.shield(future)

    def _enqueue(self, job: WriteJob | AppendJob, activity: Activity) -> None:
        job.future.add_done_callback(_retrieve)
        self._mailbox.append(job)
        if self._drainer is None:
            self._drainer = asyncio.ensure_future(self._drain(activity))
            self.pending.add(self._drainer)
            self._drainer.add_done_callback(self.pending.discard)

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
                                nxt.future.set_result(await nxt.fn(store))
                            else:
                                await self._commit_group(store, nxt)
                    except BaseException as exc:
                        for job in jobs:
                            if job.future.done():
                                continue
                            if isinstance(exc, asyncio.CancelledError):
                                job.future.cancel()
                            else:
                                job.future.set_exception(exc)
                        if not isinstance(exc, Exception):
                            raise
        finally:
            # In the drainer's last step, with no await after the check that the mailbox
            # is empty: a job queued from now on starts a new drainer. (A done callback
            # would run too late: a job queued before it would wait forever.)
            self._drainer = None
            if self._mailbox:  # cancelled (the loop shutting down): so are the jobs left
                for job in self._mailbox:
                    job.future.cancel()
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
