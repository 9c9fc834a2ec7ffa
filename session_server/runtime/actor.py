"""``AgentActor``: the pump between one agent's ``AgentCore`` and its I/O (I/O shell).

The decisions are the core's (``core.agent_core``); the actor runs the I/O they call
for, in the style of python-websockets' connection around its sans-I/O protocol:

    ask the core -> a Need: run the read, hand the answer back, ask again
                 -> an AppendPlan: run its batch in one store transaction (under the
                    write lock), hand the outcome back, run the Effects it returns

Every write of an agent goes through the actor's mailbox, a FIFO that one task drains
under the write lock, so writes never interleave and seqs come out contiguous. The caller
awaits its write through ``asyncio.shield``: once queued it completes (committed or
rolled back) even when the caller is cancelled or disconnects. An answer is given only
after the commit returned, that is after the data is durable at the configured
``synchronous`` level. Reads use a separate read-only connection and see the last
committed state without waiting for a write in progress.

Group commit: the appends that queue up while a commit is in flight go together into the
next transaction (``store.append_group``): one commit, one fsync for the group. Each
append stays atomic in its own savepoint, so a refused one (conflict, unknown session,
an id that exists, an idempotency replay) fails or replays alone; they run in queue
order, so the seqs are those of one after the other, and each caller is answered only
after the group's commit. Any other write runs alone, in its place in the queue.

The actor opens its store lazily and may be hibernated by its host (the registry); the
next call re-opens it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import deque
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterable,
    Mapping,
    Sequence,
)
from concurrent.futures import Executor
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, Protocol, TypeVar

import msgspec

from ..compaction.fallback import FallbackCause
from ..compaction.records import CompactionPlan
from ..core.agent_core import (
    AGENT_STRATEGY_KEY,
    AgentCore,
    AppendPlan,
    CompactionDue,
    Known,
    Need,
    NeedAgentStrategy,
    NeedCount,
    NeedSnapshot,
    NeedState,
    NeedWindow,
    StrategyWrite,
    compaction_report,
)
from ..core.context import WorkingContext
from ..core.errors import (
    ConflictError,
    InvalidParamsError,
    NotFoundError,
    SessionServerError,
    SummarizerError,
)
from ..core.events import ContextMessage, SessionEvent
from ..core.plans import AppendResult, Effects, NewSession
from ..core.recent import SessionView
from ..core.session_rows import SessionRows, check_rows
from ..core.tokens import get_counter
from ..core.validation import parse_event
from ..mirror_io.snapshot_index import SnapshotIndex
from ..mirror_io.writer import validate_session_id
from ..storage.sqlite_ops import IdempotencyRetention
from ..storage.store import AgentStore, Synchronous
from .compaction_run import run_compaction
from .metrics import CompactionMetrics
from .mirror_link import MirrorLink
from .ops_metrics import OperationsMetrics
from .summarizers import Summarizer

__all__ = ["MAX_GROUP_APPENDS", "MAX_GROUP_EVENTS", "ActorHost", "AgentActor", "Subscriber"]

log = logging.getLogger(__name__)
# Content above this many characters is planned (validated, counted) off the event loop.
LARGE_CONTENT_CHARS = 256 * 1024


def _content_chars(items: Iterable[SessionEvent | ContextMessage]) -> int:
    """Characters of content (not validated yet: a non-string counts as nothing)."""
    return sum(len(i.content) for i in items if isinstance(i.content, str))


T = TypeVar("T")
Subscriber = Callable[[list[SessionEvent]], None]

# A group commit holds at most this many appends and events (at least one append), so
# its transaction, and the wait of its last caller, stay bounded.
MAX_GROUP_APPENDS: Final = 64
MAX_GROUP_EVENTS: Final = 2048


@dataclass(slots=True)
class _WriteJob:
    """A write that runs alone in its place in the mailbox: ``fn(store)``."""

    fn: Callable[[AgentStore], Awaitable[Any]]
    future: asyncio.Future[Any]


@dataclass(slots=True)
class _AppendJob:
    """An append plan waiting for its group commit."""

    plan: AppendPlan
    future: asyncio.Future[AppendResult]


def _retrieve(future: asyncio.Future[Any]) -> None:
    # Read here so the error of a write whose caller left is not reported as unhandled;
    # a caller still waiting gets it through its shield.
    if not future.cancelled() and future.exception() is not None:
        log.debug("write failed: %r", future.exception())


SUMMARY_BACKOFF_MAX: Final = 300.0
"""The longest wait between two attempts at a failing summary."""

# What a build's wait for its summary came to (``AgentActor._summary``).
SummaryOutcome = Literal["written", "nothing", "slow", "failed"]


class ActorHost(Protocol):
    """What an actor needs from its owner (``ActorRegistry``): shared resources and the
    bookkeeping of the open-store bound."""

    @property
    def memory_dir(self) -> Path: ...

    @property
    def mirror(self) -> bool: ...

    @property
    def executor(self) -> Executor: ...

    @property
    def snapshot_index(self) -> SnapshotIndex | None:
        """The index ``memory.list_snapshots`` reads (``None``: read-only, no mirror)."""
        ...

    @property
    def readonly(self) -> bool:
        """Open stores read-only, without the agent lock (tools beside a server)."""
        ...

    @property
    def idempotency(self) -> IdempotencyRetention:
        """How long keyed writes can be replayed."""
        ...

    @property
    def default_strategy(self) -> dict[str, Any] | None: ...

    @property
    def summarizer(self) -> Summarizer: ...

    @property
    def metrics(self) -> CompactionMetrics: ...

    @property
    def operations(self) -> OperationsMetrics: ...

    @property
    def compaction_wait(self) -> float:
        """Seconds a build waits for a summary before it answers with the previous record."""
        ...

    @property
    def compaction_timeout(self) -> float:
        """Seconds a background summary may take before it counts as failed."""
        ...

    @property
    def summary_backoff(self) -> float:
        """Seconds before the first retry of a failed summary (doubling after each)."""
        ...

    def open_slot(self) -> AbstractAsyncContextManager[None]:
        """Held while a store opens: one at a time, with room made under the bound."""
        ...

    def store_opened(self, actor: AgentActor) -> None: ...

    def store_used(self, actor: AgentActor) -> None: ...

    def store_closed(self, actor: AgentActor) -> None: ...

    def actor_idle(self) -> None:
        """An actor's last activity ended: it may be hibernated if over the bound."""
        ...


class AgentActor:
    """One agent's memory. Obtain it with ``await registry.get(agent_id)``."""

    def __init__(
        self,
        host: ActorHost,
        agent_id: str,
        path: Path,
        *,
        synchronous: Synchronous,
        busy_timeout_ms: int,
        context_limit: int,
    ) -> None:
        self.host = host
        self.agent_id = agent_id
        self.path = path
        self.synchronous: Synchronous = synchronous
        self.busy_timeout_ms = busy_timeout_ms
        self.context_limit = context_limit
        self.core = AgentCore(
            agent_id,
            context_limit=context_limit,
            server_strategy=host.default_strategy,
            snapshots=host.mirror,
        )
        self._store: AgentStore | None = None
        # The store whose activation (``MirrorLink.activate_agent``) finished: calls use a
        # store only once it is activated.
        self._activated: AgentStore | None = None
        self._open_lock = asyncio.Lock()
        self._write_lock = asyncio.Lock()
        self._inflight = 0
        self._idle = asyncio.Event()  # set whenever the last activity in flight ends
        self._pending: set[asyncio.Task[Any]] = set()
        self._mailbox: deque[_WriteJob | _AppendJob] = deque()
        self._drainer: asyncio.Task[None] | None = None
        self._subscribers: dict[str, list[Subscriber]] = {}
        # Woken when a compaction ends, so a waiting one may begin (the core decides).
        self._compactions = asyncio.Condition()
        self._deletion_watchers: dict[str, list[Callable[[], None]]] = {}
        # Summaries run in the background, one per session; a failed one is retried after
        # a backoff (retry time, consecutive failures).
        self._summaries: dict[str, asyncio.Task[SummaryOutcome]] = {}
        self._primers: set[asyncio.Task[Any]] = set()
        self._summary_backoff: dict[str, tuple[float, int]] = {}
        self.last_used = time.monotonic()
        self.mirror = MirrorLink(
            host.memory_dir,
            agent_id,
            enabled=host.mirror,
            executor=host.executor,
            snapshot_parts=self.core.snapshot_parts,
            on_lag=host.operations.mirror_lag_seconds.observe,
            index=host.snapshot_index,
        )

    # -- lifecycle -------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._store is not None

    @property
    def busy(self) -> bool:
        return (
            self._inflight > 0
            or bool(self._pending)
            or bool(self._summaries)
            or bool(self._primers)
            or self.mirror.busy
        )

    @property
    def write_lock(self) -> asyncio.Lock:
        """Held by the mailbox's drainer around each write (or group) and its effects."""
        return self._write_lock

    @property
    def pending_writes(self) -> set[asyncio.Task[Any]]:
        """Tasks running queued writes (the mailbox's drainer; it survives the callers)."""
        return set(self._pending)

    async def _ensure_store(self) -> AgentStore:
        store = self._store
        if store is not None and self._activated is store:
            return store
        async with self._open_lock:
            if self._store is None:
                async with self.host.open_slot():
                    self._store = await AgentStore.open(
                        self.path,
                        self.agent_id,
                        synchronous=self.synchronous,
                        busy_timeout_ms=self.busy_timeout_ms,
                        executor=self.host.executor,
                        on_commit=self.host.operations.observe_commit,
                        readonly=self.host.readonly,
                        idempotency=self.host.idempotency,
                    )
                    self.host.store_opened(self)
            if self._activated is not self._store:
                # Activation removes orphan folders and repairs mirrors left behind (or
                # ahead) by a crash, a delete or a hand: see ``MirrorLink.activate_agent``.
                # Every other call waits for it (the open lock): a session created while
                # the sweep runs would be taken for an orphan and its folder removed.
                await self.mirror.activate_agent(self._store)
                self._activated = self._store
            return self._store

    async def hibernate(self) -> None:
        """Close the store (after in-flight writes finish); the next call re-opens it.

        Shielded: a cancelled caller (the idle sweep at shutdown) never leaves the store
        half closed with the write lock released.
        """
        await asyncio.shield(asyncio.ensure_future(self._hibernate()))

    async def _hibernate(self) -> None:
        async with self._write_lock:
            if self._inflight > 0:
                # A read is using the store: stay open (and tracked); a later sweep retries.
                self.host.store_used(self)
                return
            await self.mirror.close(self._store)
            # Under the open lock: a call arriving now waits until the file (and its
            # agent lock) is really closed before it opens the store again.
            async with self._open_lock:
                if self._inflight > 0:  # a read started while the mirror was flushed
                    self.host.store_used(self)
                    return
                await self._drop_store()
            self.core.hibernated()

    async def _drop_store(self) -> None:
        """Under the open lock: close the store (if open) and forget its activation."""
        store, self._store = self._store, None
        self._activated = None
        if store is not None:
            await store.close()
            self.host.store_closed(self)

    async def replace_file(self, fn: Callable[[], T]) -> T:
        """Close the store and run ``fn`` on a worker thread while no call can use or reopen
        it (a restore replaces the agent file this way under a running server); calls
        arriving meanwhile wait, then open the new file."""
        async with self._write_lock:
            while True:
                while self._inflight:
                    self._idle.clear()
                    await self._idle.wait()
                await self.mirror.close(self._store)
                async with self._open_lock:
                    if self._inflight:  # a read started while the mirror was flushed
                        continue
                    await self._drop_store()
                    self.core.hibernated()
                    loop = asyncio.get_running_loop()
                    return await loop.run_in_executor(self.host.executor, fn)

    async def close(self) -> None:
        """Cancel background summaries, wait for writes and reads in flight, then close
        the store."""
        background = [*self._summaries.values(), *self._primers]
        for task in background:
            task.cancel()
        if background:
            await asyncio.gather(*background, return_exceptions=True)
        while self._pending or self._inflight:
            if self._pending:
                await asyncio.gather(*list(self._pending), return_exceptions=True)
            else:
                self._idle.clear()
                await self._idle.wait()
        await self.hibernate()

    async def store(self) -> AgentStore:
        """The open store (opened now if needed); for tests and tools that read it."""
        return await self._ensure_store()

    @contextlib.asynccontextmanager
    async def _activity(self) -> AsyncIterator[AgentStore]:
        self._inflight += 1
        self.last_used = time.monotonic()
        try:
            store = await self._ensure_store()
            self.host.store_used(self)
            yield store
        finally:
            self._inflight -= 1
            self.last_used = time.monotonic()
            if self._inflight == 0:
                self._idle.set()
                self.host.actor_idle()  # an actor skipped while busy may go now

    async def _read(self, fn: Callable[[AgentStore], Awaitable[T]]) -> T:
        async with self._activity() as store:
            return await fn(store)

    async def _write(self, fn: Callable[[AgentStore], Awaitable[T]]) -> T:
        """Queue ``fn(store)``: it runs alone under the write lock, in queue order, and
        completes even when the caller is cancelled."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._enqueue(_WriteJob(fn, future))
        return await asyncio.shield(future)

    def _enqueue(self, job: _WriteJob | _AppendJob) -> None:
        job.future.add_done_callback(_retrieve)
        self._mailbox.append(job)
        if self._drainer is None:
            self._drainer = asyncio.ensure_future(self._drain())
            self._pending.add(self._drainer)
            self._drainer.add_done_callback(self._pending.discard)

    async def _drain(self) -> None:
        """Run the mailbox in order: a write alone, consecutive appends as one group."""
        try:
            while self._mailbox:
                async with self._write_lock:
                    # Taken under the lock: appends that queued while it was held join in.
                    nxt = self._next_jobs()
                    jobs: list[_WriteJob] | list[_AppendJob] = (
                        [nxt] if isinstance(nxt, _WriteJob) else nxt
                    )
                    try:
                        async with self._activity() as store:
                            if isinstance(nxt, _WriteJob):
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

    def _next_jobs(self) -> _WriteJob | list[_AppendJob]:
        """The next write, or the run of appends at the head within the group bounds."""
        first = self._mailbox.popleft()
        if isinstance(first, _WriteJob):
            return first
        group = [first]
        events = len(first.plan.batch.events)
        while self._mailbox and len(group) < MAX_GROUP_APPENDS:
            head = self._mailbox[0]
            if not isinstance(head, _AppendJob):
                break
            events += len(head.plan.batch.events)
            if events > MAX_GROUP_EVENTS:
                break
            group.append(head)
            self._mailbox.popleft()
        return group

    # -- the pump --------------------------------------------------------------------------

    async def _decide(self, ask: Callable[[Known], T | Need], known: Known | None = None) -> T:
        """Ask the core until it answers with something other than a read to run."""
        known = Known() if known is None else known
        while True:
            step = ask(known)
            if not isinstance(step, Need):
                return step
            self.core.learn(step, await self._fetch(step), known)

    async def _fetch(self, need: Need) -> Any:
        if isinstance(need, NeedState):
            sid = need.session_id
            return await self._read(lambda s: s.session_state(sid))
        if isinstance(need, NeedAgentStrategy):
            return await self._read(lambda s: s.get_setting(AGENT_STRATEGY_KEY))
        if isinstance(need, NeedWindow):
            sid, limit = need.session_id, need.limit
            return await self._read(lambda s: s.context_window(sid, limit=limit, from_record=True))
        if isinstance(need, NeedCount):
            sid, low, high = need.session_id, need.from_seq, need.before_seq
            return await self._read(lambda s: s.count_events(sid, low, high))
        if isinstance(need, NeedSnapshot):
            loop = asyncio.get_running_loop()
            # A file read: off the event loop.
            return await loop.run_in_executor(
                self.host.executor,
                self.mirror.snapshot_cache,
                need.session_id,
                need.last_seq,
                need.digest,
            )
        raise TypeError(f"unknown need {need!r}")  # pragma: no cover

    async def _commit(self, plan: AppendPlan) -> AppendResult:
        """Queue an append plan for the next group commit; its answer after the commit."""
        future: asyncio.Future[AppendResult] = asyncio.get_running_loop().create_future()
        self._enqueue(_AppendJob(plan, future))
        return await asyncio.shield(future)

    async def _commit_group(self, store: AgentStore, jobs: list[_AppendJob]) -> None:
        """One transaction for ``jobs`` (under the write lock), then each one's effects
        and answer, in order."""
        for sid in dict.fromkeys(job.plan.batch.session_id for job in jobs):
            try:
                await self.mirror.ensure_active(store, sid)
            except Exception as exc:  # this session's appends fail; the others go on
                for job in jobs:
                    if job.plan.batch.session_id == sid:
                        job.future.set_exception(exc)
        live = [job for job in jobs if not job.future.done()]
        if not live:
            return
        batches = []
        for job in live:
            batch = job.plan.batch
            cursor = self.mirror.cursor(batch.session_id)
            batches.append(batch if cursor is None else batch.with_mirror_seq(cursor))
        outcomes = await store.append_group(batches)
        for job, outcome in zip(live, outcomes, strict=True):
            if isinstance(outcome, SessionServerError):
                job.future.set_exception(outcome)
                continue
            try:
                effects = self.core.committed(job.plan, outcome)
                if effects is not None:
                    self._run(effects)
            except Exception as exc:  # committed, but its effects failed: say so
                job.future.set_exception(exc)
            else:
                job.future.set_result(outcome.result)

    def _run(self, effects: Effects) -> None:
        """Effects of a commit, in commit order (the write lock is held)."""
        sid = effects.session_id
        if effects.mirror:
            self.mirror.appended(sid, effects.mirror)
        if effects.notify:
            self._publish(sid, effects.notify)
        if effects.snapshot is not None:
            self.mirror.snapshot(effects.snapshot)

    # -- sessions --------------------------------------------------------------------

    async def create_session(
        self, metadata: dict[str, Any] | None = None, session_id: str | None = None
    ) -> str:
        """Create a session and return its id (``ConflictError`` if the id exists)."""
        if session_id is not None:
            validate_session_id(session_id)  # it names the session's mirror folder
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidParamsError("metadata: must be an object")
        sid = session_id or str(uuid.uuid4())
        return await self._write(lambda s: s.create_session(metadata, sid))

    async def get_session(self, session_id: str) -> dict[str, Any] | None:
        return await self._read(lambda s: s.get_session(session_id))

    async def list_sessions(self) -> list[dict[str, Any]]:
        """Sessions, most recently updated first."""
        return await self._read(lambda s: s.list_sessions())

    async def delete_session(self, session_id: str) -> bool:
        """Delete a session and its events in one transaction; False if it did not exist."""

        async def write(store: AgentStore) -> bool:
            await self.mirror.unlist(session_id)  # listed no more, even after a crash
            try:
                deleted = await store.delete_session(session_id)
            except BaseException:
                await self.mirror.relist(session_id)
                raise
            # Answered only once the folder is gone: a crash after the answer cannot
            # leave it for a view, a snapshot list or a new session of the same id.
            await self.mirror.session_deleted(session_id)
            self.core.session_deleted(session_id)
            if deleted:
                self._publish_deleted(session_id)
            return deleted

        return await self._write(write)

    # -- events ----------------------------------------------------------------------

    async def append_events(
        self,
        session_id: str,
        events: Sequence[SessionEvent],
        *,
        expected_last_seq: int | None = None,
        idempotency_key: str | None = None,
    ) -> AppendResult:
        """Append events atomically (all or none); the callers' seq and session_id are ignored.

        Ids and timestamps are kept when given, assigned otherwise. An empty list is a
        no-op (even for an unknown session). A repeated ``idempotency_key`` returns the
        first call's result without writing; an ``expected_last_seq`` that is not the
        session's last seq raises ``ConflictError`` with ``data["last_seq"]``.
        """
        plan = await self._off_loop_if_large(
            _content_chars(events),
            lambda: self.core.plan_events(
                session_id,
                events,
                expected_last_seq=expected_last_seq,
                idempotency_key=idempotency_key,
            ),
        )
        if plan.batch.writes_nothing:
            return await self._decide(lambda known: self.core.unwritten(plan, known))
        return await self._commit(plan)

    async def _off_loop_if_large(self, size: int, plan: Callable[[], T]) -> T:
        """Run the pure planning step ``plan`` (validation and token counting, linear in
        the content) on a worker thread when the content is large: a 15 MiB append
        counted on the event loop stalled every client for seconds."""
        if size < LARGE_CONTENT_CHARS:
            return plan()
        return await asyncio.get_running_loop().run_in_executor(self.host.executor, plan)

    async def import_events(
        self,
        events: Sequence[SessionEvent],
        *,
        session_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> tuple[str, AppendResult]:
        """Create a session holding ``events`` in one transaction (all of it, or nothing)."""
        if session_id is not None:
            validate_session_id(session_id)
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidParamsError("metadata: must be an object")
        sid = session_id or str(uuid.uuid4())
        plan = self.core.plan_events(sid, events, create=NewSession(self.agent_id, metadata))
        return sid, await self._commit(plan)

    async def session_rows(self, session_id: str) -> SessionRows:
        """Everything SQLite holds about the session (one snapshot); ``NotFoundError``."""
        rows = await self._read(lambda s: s.session_rows(session_id))
        if rows is None:
            raise NotFoundError.session(session_id)
        return rows

    async def import_rows(self, rows: SessionRows) -> None:
        """Write a whole session as it is (``core.session_rows``: checked first), in one
        transaction; its mirror files are written from it right after the commit."""
        validate_session_id(rows.session.id)
        check_rows(rows)

        async def write(store: AgentStore) -> None:
            await store.insert_session_rows(rows)
            await self.mirror.ensure_active(store, rows.session.id)

        await self._write(write)

    async def load_events(
        self,
        session_id: str,
        *,
        limit: int | None = 50,
        tail: bool = True,
        since: int | None = None,
        after_seq: int | None = None,
        actions: Iterable[str] | None = None,
    ) -> list[SessionEvent]:
        """Events oldest first; ``tail`` picks the last ``limit``; filters apply first."""
        return await self._read(
            lambda s: s.load_events(
                session_id,
                limit=limit,
                tail=tail,
                since=since,
                after_seq=after_seq,
                actions=actions,
            )
        )

    async def events_bytes(self, session_id: str) -> int:
        """About how many bytes the session's events take in JSON (a lower bound of any
        answer or export that holds them all)."""
        return await self._read(lambda s: s.events_bytes(session_id))

    async def load_events_bounded(
        self,
        session_id: str,
        *,
        max_bytes: int | None,
        partial: bool = True,
        limit: int | None = 50,
        tail: bool = True,
        since: int | None = None,
        after_seq: int | None = None,
        actions: Iterable[str] | None = None,
    ) -> tuple[list[SessionEvent], bool]:
        """``load_events`` within about ``max_bytes`` (``AgentStore.load_events_bounded``;
        ``None``: no bound): ``(events, complete)``."""
        return await self._read(
            lambda s: s.load_events_bounded(
                session_id,
                max_bytes=max_bytes,
                partial=partial,
                limit=limit,
                tail=tail,
                since=since,
                after_seq=after_seq,
                actions=actions,
            )
        )

    async def delete_events(self, session_id: str, event_ids: Sequence[str]) -> int:
        """Delete events of this session by id (unknown ids ignored); returns how many."""

        async def write(store: AgentStore) -> int:
            count = await store.delete_events(session_id, list(event_ids))
            if count:
                self.core.events_deleted(session_id)
                self.mirror.events_deleted(store, session_id)
            return count

        return await self._write(write)

    # -- session edits beside the turn path ------------------------------------------

    async def update_session(
        self, session_id: str, metadata: dict[str, Any] | None
    ) -> dict[str, Any]:
        """Replace the session's metadata (``None`` clears it); the updated session."""
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidParamsError("metadata: must be an object", data={"field": "metadata"})
        return await self._write(lambda s: s.replace_metadata(session_id, metadata))

    async def list_sessions_page(
        self,
        *,
        metadata: Mapping[str, Any] | None = None,
        limit: int | None = None,
        offset: int = 0,
        only: Collection[str] | None = None,
        after: tuple[int, int, str] | None = None,
    ) -> tuple[list[dict[str, Any]], int]:
        """A page of sessions (most recently updated first) whose metadata has each key of
        ``metadata`` with that exact value (scalars), among ``only`` when given; and how
        many sessions match. ``after``: start after that ``(updated_at, created_at, id)``."""
        if limit is not None and limit < 1:
            raise InvalidParamsError("limit: must be a positive integer", data={"field": "limit"})
        if offset < 0:
            raise InvalidParamsError("offset: must be >= 0", data={"field": "offset"})
        return await self._read(
            lambda s: s.list_sessions_page(
                metadata=metadata, limit=limit, offset=offset, only=only, after=after
            )
        )

    async def pop_event(
        self,
        session_id: str,
        *,
        event_id: str | None = None,
        replace_with: SessionEvent | None = None,
    ) -> SessionEvent | None:
        """Remove the newest event that is not a compaction record (or rewrite it in place,
        same id, seq and timestamp, with ``replace_with``), atomically; the event as it
        was, ``None`` when there is none. With ``event_id`` the newest such event must be
        that one, else ``ConflictError``: read the tail, decide, pop with the id you read,
        and no other writer's event is lost."""
        replacement: tuple[SessionEvent, int] | None = None
        if replace_with is not None:
            checked = parse_event(msgspec.to_builtins(replace_with), "replace_with")
            if checked.action == "compaction":
                raise InvalidParamsError(
                    "replace_with.action: a popped event cannot become a compaction record",
                    data={"field": "replace_with.action"},
                )
            replacement = (checked, get_counter().count_event(checked))

        async def write(store: AgentStore) -> SessionEvent | None:
            popped = await store.pop_event(session_id, event_id, replacement)
            if popped is not None:
                self.core.events_deleted(session_id)
                self.mirror.events_deleted(store, session_id)
            return popped

        return await self._write(write)

    async def clear_session(self, session_id: str) -> int:
        """Delete every event of the session at once, keeping the session (its metadata
        and strategy); seqs are never reused. Returns how many events were deleted."""

        async def write(store: AgentStore) -> int:
            deleted = await store.clear_events(session_id)
            self.core.events_deleted(session_id)
            self.mirror.events_deleted(store, session_id)
            return deleted

        return await self._write(write)

    # -- subscriptions -----------------------------------------------------------------

    def subscribe(
        self,
        session_id: str,
        callback: Subscriber,
        on_deleted: Callable[[], None] | None = None,
    ) -> Callable[[], None]:
        """Call ``callback(events)`` after every committed append to ``session_id``, and
        ``on_deleted()`` once when the session is deleted (the subscription ends then).

        Calls happen on the event loop, in seq order, while the write lock is still held,
        so no append can be missed or reordered. Returns the unsubscribe function.
        """
        subs = self._subscribers.setdefault(session_id, [])
        subs.append(callback)
        watchers = self._deletion_watchers.setdefault(session_id, [])
        if on_deleted is not None:
            watchers.append(on_deleted)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                subs.remove(callback)
            with contextlib.suppress(ValueError):
                if on_deleted is not None:
                    watchers.remove(on_deleted)
            if not subs and self._subscribers.get(session_id) is subs:
                self._subscribers.pop(session_id, None)
            if not watchers and self._deletion_watchers.get(session_id) is watchers:
                self._deletion_watchers.pop(session_id, None)

        return unsubscribe

    def _publish_deleted(self, session_id: str) -> None:
        self._subscribers.pop(session_id, None)
        for watcher in self._deletion_watchers.pop(session_id, ()):
            try:
                watcher()
            except Exception:
                log.exception("deletion watcher of %r/%r failed", self.agent_id, session_id)

    def _publish(self, session_id: str, events: list[SessionEvent]) -> None:
        for callback in list(self._subscribers.get(session_id, ())):
            try:
                callback(events)
            except Exception:
                log.exception("subscriber of %r/%r failed", self.agent_id, session_id)

    # -- working contexts ----------------------------------------------------------------

    async def mirror_settled(self) -> None:
        """Make the mirror files reflect every commit answered so far: the store is
        opened if the agent exists (activation removes orphan folders and repairs stale
        mirrors), then every scheduled mirror write is waited for. An agent without a
        file has no mirror to settle (and none is created)."""
        if self._store is None and not self.path.exists():
            return
        async with self._activity():
            await self.mirror.drain()

    async def view(self, session_id: str, limit: int) -> SessionView:
        """The tool-pair-safe window of the last ``limit`` events and the session state,
        from the core's cache when it can answer, else from the store."""
        return await self._decide(lambda known: self.core.view(session_id, limit, known))

    async def build_working_context(
        self,
        session_id: str,
        *,
        system_instructions: Iterable[str] | None = None,
        limit: int | None = None,
        strategy: dict[str, Any] | None = None,
        may_compact: bool = True,
    ) -> WorkingContext:
        """Build the context for the next model call (local use: no RPC involved).

        Reads the last ``limit`` events (default: the registry's ``context_limit``) in one
        snapshot, moved so that no tool call is split from its results; ``base_seq`` is the
        session's last seq at that snapshot; ``token_count`` comes from the per-event counts
        stored on write (only compacted messages and instructions are tokenised here).

        ``strategy`` overrides the session's compaction strategy for this request
        (precedence: request > session > agent default > server default). The latest
        compaction record always applies; under ``compact`` a new record is appended when
        a trigger fires, under ``summarize`` when the last persist reported token pressure
        (exactly once). A summary slower than ``compaction_wait`` or failing never fails
        the build: the latest record applies, after a placeholder record when the strategy
        sets placeholder parameters (``compaction.fallback``).
        ``may_compact=False`` (a read-only caller, e.g. a read-scoped token) applies the
        latest record but never appends one.
        """
        return await self._build(
            session_id, list(system_instructions or []), limit, strategy, may_compact=may_compact
        )

    async def current_context(self, session_id: str) -> WorkingContext:
        """The default context as it stands, read only: never compacts (e.g. exports)."""
        return await self._build(session_id, [], None, None, may_compact=False)

    async def _build(
        self,
        session_id: str,
        instructions: list[str],
        limit: int | None,
        strategy: Mapping[str, Any] | None,
        *,
        may_compact: bool,
    ) -> WorkingContext:
        known = Known()
        while True:
            step: WorkingContext | CompactionDue = await self._decide(
                lambda k: self.core.build(
                    session_id,
                    k,
                    instructions=instructions,
                    limit=limit,
                    strategy=strategy,
                    may_compact=may_compact,
                ),
                known,
            )
            if isinstance(step, WorkingContext):
                return step
            if step.config.mode == "summarize" and not step.force:
                # Off the critical path: the build waits a bounded time, then answers with
                # the previous record (and placeholders, if the strategy has them) while
                # the summary goes on (or is retried later).
                outcome = await self._summary(step)
                if outcome == "slow" or outcome == "failed":
                    await self._placeholder_fallback(step, outcome)
            else:
                await self._compaction(step)
            known.compacted = True
            known.forget_views(session_id)  # it may have committed: ask the cache again

    # -- compaction strategies ---------------------------------------------------------------

    async def get_strategy(self, session_id: str | None = None) -> dict[str, Any]:
        """``{server, agent, session, effective}`` strategies (session None: the agent's)."""
        return await self._decide(lambda known: self.core.strategy_levels(session_id, known))

    async def set_strategy(
        self, strategy: dict[str, Any] | None, session_id: str | None = None
    ) -> dict[str, Any]:
        """Persist a strategy for a session (or the agent default); ``None`` clears it.

        Only the keys given are stored (``None`` or ``{}`` clears the level); the merged
        result must still be valid, so a refused strategy is never stored.
        """
        write = await self._decide(lambda known: self.core.plan_strategy(strategy, session_id))
        await self._write(lambda s: self._store_strategy(s, write))
        return await self.get_strategy(session_id)

    async def _store_strategy(self, store: AgentStore, write: StrategyWrite) -> None:
        if write.session_id is not None:
            await store.set_session_strategy(write.session_id, write.stored)
        elif write.stored is not None:
            await store.set_setting(AGENT_STRATEGY_KEY, write.stored)
        else:
            await store.delete_setting(AGENT_STRATEGY_KEY)
        self.core.strategy_written(write)

    async def compact(
        self,
        session_id: str,
        *,
        strategy: dict[str, Any] | None = None,
        system_instructions: Iterable[str] | None = None,
    ) -> dict[str, Any]:
        """Compact now with the effective strategy; ``compacted: false`` says why not."""
        instructions = list(system_instructions or [])
        due = await self._decide(
            lambda known: self.core.plan_compact(
                session_id, known, strategy=strategy, instructions=instructions
            )
        )
        return compaction_report(await self._compaction(due))

    async def _summary(self, due: CompactionDue) -> SummaryOutcome:
        """Start (or join) the session's background summary and wait for it at most
        ``compaction_wait`` seconds: ``written``, ``nothing`` (done, nothing to write),
        ``slow`` (still running) or ``failed`` (failed, timed out, or backing off)."""
        sid = due.session_id
        task = self._summaries.get(sid)
        if task is None:
            retry_at, _failures = self._summary_backoff.get(sid, (0.0, 0))
            if time.monotonic() < retry_at:
                return "failed"  # backing off after a failure: the previous record applies
            task = asyncio.ensure_future(self._background_summary(due))
            self._summaries[sid] = task
            task.add_done_callback(lambda t: self._summary_done(sid, t))
        done, _ = await asyncio.wait({task}, timeout=self.host.compaction_wait)
        if task in done:
            return "failed" if task.cancelled() else task.result()
        self.host.metrics.summary_slow()
        log.warning(
            "summary of %r/%r is taking longer than %.1fs: answering with the previous "
            "compaction record; it goes on in the background",
            self.agent_id,
            sid,
            self.host.compaction_wait,
        )
        return "slow"

    def _summary_done(self, session_id: str, task: asyncio.Task[SummaryOutcome]) -> None:
        if self._summaries.get(session_id) is task:
            del self._summaries[session_id]

    async def _background_summary(self, due: CompactionDue) -> SummaryOutcome:
        """One summary, bounded by ``compaction_timeout``; a failure is logged, counted
        and backed off (``summary_backoff`` seconds, doubling, at most 5 min), never
        raised to a build."""
        sid = due.session_id
        try:
            plan = await asyncio.wait_for(
                self._compaction_turn(due), timeout=self.host.compaction_timeout
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            _retry_at, failures = self._summary_backoff.get(sid, (0.0, 0))
            delay = min(SUMMARY_BACKOFF_MAX, self.host.summary_backoff * 2**failures)
            self._summary_backoff[sid] = (time.monotonic() + delay, failures + 1)
            self.host.metrics.summary_failed()
            reason = "timed out" if isinstance(exc, TimeoutError) else f"failed: {exc}"
            log.warning(
                "summary of %r/%r %s; the previous compaction record applies; retrying in %.0fs",
                self.agent_id,
                sid,
                reason,
                delay,
            )
            return "failed"
        self._summary_backoff.pop(sid, None)
        self._report_futile(sid)
        return "nothing" if plan.record is None else "written"

    async def _placeholder_fallback(self, due: CompactionDue, cause: FallbackCause) -> None:
        """The summary is ``cause``: write the placeholder record the core plans (when
        the strategy sets placeholder parameters), logged and counted. A session that
        moved meanwhile refuses it: the build answers with what is there."""
        fallback = await self._decide(
            lambda known: self.core.placeholder_fallback(due, cause, known)
        )
        if fallback is None:
            return
        try:
            await self._commit(fallback.append)
        except ConflictError:
            return  # a turn or the summary landed since: nothing to fall back from
        self.host.metrics.observe(fallback.plan)
        self.host.metrics.summary_fallback()
        log.warning(
            "summary of %r/%r %s: placeholders apply meanwhile (%s)",
            self.agent_id,
            due.session_id,
            cause,
            fallback.plan.reason,
        )

    def _prime_summary(
        self, session_id: str, instructions: list[str], strategy: Mapping[str, Any] | None
    ) -> None:
        """A persist flagged token pressure: start the summary now, in the background, so
        the next build usually finds it done."""

        async def prime() -> None:
            try:
                await self._build(session_id, instructions, None, strategy, may_compact=True)
            except Exception:
                log.exception("background build of %r/%r failed", self.agent_id, session_id)

        task = asyncio.ensure_future(prime())
        self._primers.add(task)
        task.add_done_callback(self._primers.discard)

    async def _compaction(self, due: CompactionDue) -> CompactionPlan:
        """Plan and, when there is something to do, append one compaction event.

        Runs as its own task: a caller cancelled mid-way does not end the session's
        compaction turn before the append finished (the flag is acted on exactly once).
        """
        return await asyncio.shield(asyncio.ensure_future(self._compaction_turn(due)))

    async def _compaction_turn(self, due: CompactionDue) -> CompactionPlan:
        sid = due.session_id
        async with self._compactions:
            await self._compactions.wait_for(lambda: self.core.begin_compaction(sid))
        try:
            # Read again inside the turn: an earlier compaction may have acted already.
            given = await self._decide(lambda known: self.core.compaction_input(due, known))
            try:
                plan = await run_compaction(
                    given.events,
                    due.config,
                    previous_record=given.record_data,
                    summarizer=self.host.summarizer,
                    force=due.force,
                    pressure=given.pressure,
                    system_instructions=due.instructions,
                )
            except SummarizerError:
                self.host.operations.summarizer_failures.inc()
                raise
            append = self.core.after_compaction(due, given, plan)
            if append is not None:
                await self._commit(append)
            if append is not None and append.batch.events:
                self.host.metrics.observe(plan)
                return plan
            return CompactionPlan(plan.strategy, None, plan.reason) if plan.record else plan
        finally:
            self.core.end_compaction(sid)
            async with self._compactions:
                self._compactions.notify_all()

    # -- turns -------------------------------------------------------------------------------

    async def persist_working_context(
        self,
        session_id: str,
        ctx: WorkingContext,
        *,
        idempotency_key: str | None = None,
        usage: dict[str, Any] | None = None,
        on_conflict: Literal["append", "reject"] = "append",
        validated: bool = False,
        strategy: Mapping[str, Any] | None = None,
    ) -> AppendResult:
        """Write exactly ``ctx.get_new_messages()`` as events, in one transaction.

        ``on_conflict="reject"`` fails with ``ConflictError`` (writing nothing) when the
        session moved past ``ctx.base_seq``; ``"append"`` appends after whatever is there.
        The session's pressure flag is set when the prompt size calls for compaction under
        the effective strategy (``strategy`` is the request level): the size ``usage``
        reports in any provider shape, or the server's own count of the context. A flag
        set under ``summarize`` starts the summary in the background at once. The end of
        the turn writes ``working_context_snapshot.json`` (with the mirror on).
        ``validated=True`` says the new messages come straight from
        ``core.validation.parse_messages`` (as the RPC layer's do): they are not checked
        again.
        """
        turn = await self._off_loop_if_large(
            _content_chars(ctx.get_new_messages()),
            lambda: self.core.prepare_turn(
                session_id,
                ctx,
                usage=usage,
                on_conflict=on_conflict,
                idempotency_key=idempotency_key,
                validated=validated,
                strategy=strategy,
            ),
        )
        step: AppendPlan | AppendResult = await self._decide(
            lambda known: self.core.plan_turn(turn, known)
        )
        if isinstance(step, AppendResult):
            return step
        result = await self._commit(step)
        if (
            step.snapshot is not None
            and self.mirror.enabled
            and self.core.cached_view(session_id, self.context_limit) is None
        ):
            # The snapshot renders from the cache: read the window once (it stays warm
            # from now on), then ask for the snapshot again.
            await self._decide(lambda k: self.core.view(session_id, self.context_limit, k))
            self.mirror.snapshot(step.snapshot)
        if step.batch.compaction_required:
            self._prime_summary(session_id, list(ctx.system_instructions), strategy)
        self._report_futile(session_id)
        return result

    def _report_futile(self, session_id: str) -> None:
        """Log and count, once per reason, why a compaction would gain nothing."""
        note = self.core.futile_note(session_id)
        if note is not None:
            self.host.metrics.compaction_futile()
            log.warning("no compaction of %r/%r: %s", self.agent_id, session_id, note)
