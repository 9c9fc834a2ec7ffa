"""``AgentActor``: the pump between one agent's ``AgentCore`` and its I/O (I/O shell).

The decisions are the core's (``core.agent_core``); the actor runs the I/O they call
for, in the style of python-websockets' connection around its sans-I/O protocol:

    ask the core -> a Need: run the read, hand the answer back, ask again
                 -> an AppendPlan: run its batch in one store transaction (under the
                    write lock), hand the outcome back, run the Effects it returns

Every write of an agent goes through the actor's mailbox (``write_queue.WriteQueue``), a
FIFO that one task drains under the write lock, so writes never interleave and seqs come
out contiguous; once queued a write completes even when its caller is cancelled. An
answer is given only after the commit returned, that is after the data is durable at the
configured ``synchronous`` level. Reads use a separate read-only connection and see the
last committed state without waiting for a write in progress.

Group commit: the appends that queue up while a commit is in flight go together into the
next transaction, each atomic in its own savepoint (``commit_effects.GroupCommit``, which
also runs each commit's effects: mirror, subscribers, snapshot). Any other write runs
alone, in its place in the queue.

The actor holds its collaborators, each with state of its own: the queue, the group
commit, the subscriptions (``subscriptions``), the mirror link (``mirror_link``) and the
compactions with their background summaries (``compaction_turns``). The operations of
its local API are its own methods: the writes the core plans (a session, appended and
imported events, the end of a turn: only a large plan runs on a worker thread, weighed
by ``plan_size``), the plain reads (straight to the store's read-only connection) and the
edits beside the turn path (delete, clear, pop, re-describe, import whole sessions). It
opens its store lazily and may be hibernated by its host (the registry); the next call
re-opens it.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Coroutine, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

import msgspec

from ..adapters.tools import tool_definitions
from ..core.agent_core import AgentCore, compaction_report
from ..core.decisions import AppendPlan, PreparedTurn, StrategyWrite
from ..core.needs import (
    Known,
    Need,
    NeedAgentStrategy,
    NeedBlocks,
    NeedCount,
    NeedSnapshot,
    NeedState,
    NeedWindow,
)
from ..core.strategies import AGENT_STRATEGY_KEY
from ..mirror_io.writer import validate_new_session_id
from ..storage.store import AgentStore
from ..storage.store_connections import Synchronous
from ..storage.usage_rows import GroupBy
from ..values.blocks import Author, BlockRevision, BlockSet
from ..values.branches import Branch, ForkResult, RewindResult
from ..values.context import WorkingContext
from ..values.errors import InvalidParamsError, NotFoundError
from ..values.events import SessionEvent
from ..values.plans import AppendResult, NewSession
from ..values.recent import SessionView
from ..values.session_rows import SessionRows, check_rows
from ..values.tokens import get_counter, loaded_counter
from ..values.usage import budget_json
from ..values.validation import parse_event
from . import branches
from .activity import ActivityScope
from .actor_host import ActorHost
from .commit_effects import GroupCommit
from .compaction_turns import CompactionTurns
from .live_streams import LiveStreams
from .memory_blocks import MemoryBlocks, read_for_build, remember_count
from .mirror_link import MirrorLink, snapshot_from_file
from .model_tools import MODEL_TOOLS, call_tool
from .off_loop import LARGE_CONTENT_CHARS, instructions_counted, off_loop_if_large
from .plan_size import no_prompt_size, plan_size
from .recall import Recall
from .retention_keeper import RetentionKeeper
from .session_erasure import delete_sessions
from .subscriptions import Subscriber, Subscriptions
from .usage_ledger import UsageLedger
from .write_queue import WriteQueue

__all__ = ["AgentActor", "Subscriber", "persist_from_wire"]

T = TypeVar("T")


def persist_from_wire(
    actor: AgentActor,
    session_id: str,
    ctx: WorkingContext,
    *,
    idempotency_key: str | None = None,
    usage: dict[str, Any] | None = None,
    on_conflict: Literal["append", "reject"] = "append",
    strategy: Mapping[str, Any] | None = None,
    content_bound: int | None = None,
    model: str | None = None,
) -> Coroutine[Any, Any, AppendResult]:
    """``actor.persist_working_context`` for the RPC layer (``turn.persist``): the new
    messages come straight from ``values.validation.parse_messages`` (the params model
    ran it), so they are not checked again; ``content_bound`` is the size of the frame
    they were decoded from, so a small turn is known to be small without a walk of its
    text (``plan_size``). Wire concerns, kept out of the actor's public method."""
    return _persist(
        actor, session_id, ctx, idempotency_key, usage, on_conflict, strategy, True, content_bound,
        model,
    )  # fmt: skip


async def _persist(
    actor: AgentActor,
    session_id: str,
    ctx: WorkingContext,
    idempotency_key: str | None,
    usage: dict[str, Any] | None,
    on_conflict: Literal["append", "reject"],
    strategy: Mapping[str, Any] | None,
    validated: bool,
    content_bound: int | None,
    model: str | None = None,
) -> AppendResult:
    """The end of a turn (``persist_working_context``); ``validated``: the new messages
    are ``parse_messages``' own (not checked again)."""
    size = plan_size(ctx.get_new_messages(), content_bound)

    def prepare() -> PreparedTurn:
        return actor.core.prepare_turn(
            session_id,
            ctx,
            usage=usage,
            on_conflict=on_conflict,
            idempotency_key=idempotency_key,
            validated=validated,
            strategy=strategy,
            count=size >= LARGE_CONTENT_CHARS,  # off the loop, then
            model=model,
        )

    # The small turn (the sequential path) is prepared, planned and queued without
    # a coroutine or a context manager of its own: each step awaits only what it must.
    if size < LARGE_CONTENT_CHARS:
        turn = prepare()
    else:
        turn = await off_loop_if_large(actor.host.executor, size, prepare)
    # The pressure check counts the instructions, unless the caller reported a size.
    counted = turn.instructions if no_prompt_size(usage) else ()
    step: AppendPlan | AppendResult
    if not counted:
        known = Known()
        first = actor.core.plan_turn(turn, known)
        if isinstance(first, Need):  # a read first (a cold cache): the pump
            step = await actor.decide(lambda k: actor.core.plan_turn(turn, k), known, first)
        else:
            step = first
    else:
        async with instructions_counted(actor.host.executor, counted):
            step = await actor.decide(lambda known: actor.core.plan_turn(turn, known))
    if isinstance(step, AppendResult):
        return step
    result = await actor.commit(step)
    if step.batch.compaction_required:
        actor.compactions.prime(actor, session_id, list(ctx.system_instructions), strategy)
    actor.compactions.report_futile(session_id)
    if (
        turn.recorded is not None
        and result.seqs
        and await actor.usage.after_turn(actor, session_id, turn.recorded)
    ):
        result = msgspec.structs.replace(result, budget_exceeded=True)
    return result


class AgentActor:
    """One agent's memory. Obtain it with ``await registry.get(agent_id)``."""

    def __init__(
        self,
        host: ActorHost[AgentActor],
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
            cache_budget=host.cache_budget,
        )
        self._store: AgentStore | None = None
        # The store whose activation (``MirrorLink.activate_agent``) finished: calls use a
        # store only once it is activated.
        self._activated: AgentStore | None = None
        self._open_lock = asyncio.Lock()
        self._write_lock = asyncio.Lock()
        self._inflight = 0
        self._idle = asyncio.Event()  # set whenever the last activity in flight ends
        self.last_used = time.monotonic()
        self.mirror = MirrorLink(
            host.memory_dir,
            agent_id,
            enabled=host.mirror,
            executor=host.mirror_executor,
            snapshot_parts=self.core.snapshot_parts,
            read_snapshot=functools.partial(
                snapshot_from_file, path, context_limit, busy_timeout_ms
            ),
            on_lag=host.operations.mirror_lag_seconds.observe,
            index=host.snapshot_index,
        )
        self.subscriptions = Subscriptions(agent_id)
        self._subscribers = self.subscriptions.subscribers  # the same dict, by session
        self.usage = UsageLedger(agent_id, host.usage_settings)
        self.group_commit = GroupCommit(
            self.core, self.mirror, self.subscriptions, on_usage=self.usage.committed
        )
        # The parts hold no reference back to the actor (the actor's callables are given
        # with each call): a dropped actor is freed at once, not by the cycle collector.
        self.queue = WriteQueue(self._write_lock, self.group_commit.commit_group)
        self.compactions = CompactionTurns(agent_id, self.core, host)
        self.streams = LiveStreams(agent_id, host.stream_limits)
        self.blocks = MemoryBlocks(
            self.core.blocks, host.executor, self.mirror, self.mirror.writer.agent_dir
        )
        self.retention = RetentionKeeper(agent_id, host.usage_settings.metrics)
        self.recall = Recall(agent_id, readonly=host.readonly)

    # -- lifecycle -------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._store is not None

    @property
    def busy(self) -> bool:
        return (
            self._inflight > 0
            or bool(self.queue.pending)
            or self.compactions.busy
            or self.mirror.busy
        )

    @property
    def write_lock(self) -> asyncio.Lock:
        """Held by the mailbox's drainer around each write (or group) and its effects."""
        return self._write_lock

    @property
    def pending_writes(self) -> set[asyncio.Task[Any]]:
        """Tasks running queued writes (the mailbox's drainer; it survives the callers)."""
        return set(self.queue.pending)

    async def _ensure_store(self) -> AgentStore:
        store = self._store
        if store is not None and self._activated is store:
            return store
        async with self._open_lock:
            if loaded_counter() is None:
                # The core counts tokens with ``get_counter`` on the event loop (a
                # persist's pressure check, a build's total, a compaction's figures), and
                # no decision of this actor runs before its store is activated. Until
                # the encoding is loaded (at start-up the registry's load holds the
                # counters' lock for half a second) it is awaited here, on a worker
                # thread: the loop goes on serving, the counts stay exact.
                await self.host.executor.run(get_counter)
            if self._store is None:
                async with self.host.open_slot():
                    logs = self.host.turn_logs  # cluster mode: claims the agent, or refuses
                    turn_log = (
                        None if logs is None else await logs.acquire(self.agent_id, self.path)
                    )
                    self._store = await AgentStore.open(
                        self.path,
                        self.agent_id,
                        synchronous=self.synchronous,
                        busy_timeout_ms=self.busy_timeout_ms,
                        executor=self.host.executor,
                        on_commit=self.host.operations.observe_commit,
                        readonly=self.host.readonly,
                        idempotency=self.host.idempotency,
                        count_executor=self.host.count_executor,
                        turn_log=turn_log,
                    )
                    self.host.store_opened(self)
            if self._activated is not self._store:
                # Activation removes orphan folders and repairs mirrors left behind (or
                # ahead) by a crash, a delete or a hand: see ``MirrorLink.activate_agent``.
                # Every other call waits for it (the open lock): a session created while
                # the sweep runs would be taken for an orphan and its folder removed.
                await self.mirror.activate_agent(self._store)
                self._activated = self._store
                self.recall.activated(self)  # index what a migration left (background)
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
            self.usage.forget()
            self.retention.forget()

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
        arriving meanwhile wait, then open the new file. A cancelled caller holds the
        locks until ``fn`` ended."""
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
                    self.streams.forget()  # the new file's streams are read again
                    self.usage.forget()
                    self.retention.forget()
                    return await self.host.executor.run_to_end(fn)

    async def close(self) -> None:
        """Cancel background summaries, wait for writes and reads in flight, then close
        the store."""
        await self.compactions.cancel()
        await self.recall.cancel()
        while self.queue.pending or self._inflight:
            if self.queue.pending:
                await asyncio.gather(*list(self.queue.pending), return_exceptions=True)
            else:
                self._idle.clear()
                await self._idle.wait()
        await self.hibernate()

    async def store(self) -> AgentStore:
        """The open store (opened now if needed); for tests and tools that read it."""
        return await self._ensure_store()

    def _activity(self) -> ActivityScope:
        """``async with self._activity() as store``: the open store (opened now if needed),
        counted as activity in flight until the block ends."""
        return ActivityScope(self._begin_activity, self._end_activity)

    async def _begin_activity(self) -> AgentStore:
        self._inflight += 1
        self.last_used = time.monotonic()
        try:
            store = self._store
            if store is None or self._activated is not store:
                store = await self._ensure_store()
            self.host.store_used(self)
        except BaseException:
            self._end_activity()
            raise
        return store

    def _end_activity(self) -> None:
        self._inflight -= 1
        self.last_used = time.monotonic()
        if self._inflight == 0:
            self._idle.set()
            self.host.actor_idle()  # an actor skipped while busy may go now

    async def run_read(self, fn: Callable[[AgentStore], Awaitable[T]]) -> T:
        """``fn(store)`` on the read connection, as an activity (the store opened if needed)."""
        async with self._activity() as store:
            return await fn(store)

    async def run_write(self, fn: Callable[[AgentStore], Awaitable[T]]) -> T:
        """Queue ``fn(store)``: it runs alone under the write lock, in queue order, and
        completes even when the caller is cancelled."""
        return await self.queue.write(fn, self._activity)

    def commit(self, plan: AppendPlan) -> Coroutine[Any, Any, AppendResult]:
        """Queue an append plan for the next group commit; await its answer (after the
        commit). The queue's coroutine itself: no frame of its own on every persist."""
        return self.queue.commit(plan, self._activity)

    # -- the pump --------------------------------------------------------------------------

    async def decide(
        self,
        ask: Callable[[Known], T | Need],
        known: Known | None = None,
        first: Need | None = None,
    ) -> T:
        """Ask the core until it answers with something other than a read to run
        (``first``: the read the caller's own first ask returned with ``known``)."""
        known = Known() if known is None else known
        step = ask(known) if first is None else first
        while isinstance(step, Need):
            self.core.learn(step, await self._fetch(step), known)
            step = ask(known)
        return step

    async def _fetch(self, need: Need) -> Any:
        if isinstance(need, NeedState):
            sid = need.session_id
            return await self.run_read(lambda s: s.session_state(sid))
        if isinstance(need, NeedAgentStrategy):
            return await self.run_read(lambda s: s.get_setting(AGENT_STRATEGY_KEY))
        if isinstance(need, NeedWindow):
            sid, limit = need.session_id, need.limit
            return await self.run_read(
                lambda s: s.context_window(sid, limit=limit, from_record=True)
            )
        if isinstance(need, NeedBlocks):
            sid = need.session_id
            blocks, text, tokens = await self.run_read(
                lambda s: s.query(lambda c: read_for_build(c, sid))
            )
            remember_count(text, tokens)
            return blocks, text
        if isinstance(need, NeedCount):
            sid, low, high = need.session_id, need.from_seq, need.before_seq
            return await self.run_read(lambda s: s.count_events(sid, low, high))
        if isinstance(need, NeedSnapshot):
            # A file read: off the event loop.
            return await self.host.executor.run(
                self.mirror.snapshot_cache,
                need.session_id,
                need.last_seq,
                need.digest,
            )
        raise TypeError(f"unknown need {need!r}")  # pragma: no cover

    # -- reads: sessions and events as the store holds them (no core cache involved) ------

    async def stored_session(self, session_id: str) -> dict[str, Any] | None:
        """The session row as the store holds it (``get_session`` adds usage's fields)."""
        return await self.run_read(lambda s: s.get_session(session_id))

    async def list_sessions(self) -> list[dict[str, Any]]:
        """Sessions, most recently updated first."""
        return await self.run_read(lambda s: s.list_sessions())

    async def session_rows(self, session_id: str) -> SessionRows:
        """Everything SQLite holds about the session (one snapshot); ``NotFoundError``."""
        rows = await self.run_read(lambda s: s.session_rows(session_id))
        if rows is None:
            raise NotFoundError.session(session_id)
        return rows

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
        return await self.run_read(
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
        return await self.run_read(lambda s: s.events_bytes(session_id))

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
        return await self.run_read(
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

    async def list_sessions_page(
        self,
        *,
        metadata: Mapping[str, Any] | None = None,
        limit: int | None = None,
        offset: int = 0,
        only: Collection[str] | None = None,
        after: tuple[int, int, str] | None = None,
        count: bool = True,
    ) -> tuple[list[dict[str, Any]], int | None]:
        """A page of sessions (most recently updated first) whose metadata has each key of
        ``metadata`` with that exact value (scalars), among ``only`` when given; and how
        many sessions match (``None`` without ``count``, which saves reading them all).
        ``after``: start after that ``(updated_at, created_at, id)``."""
        if limit is not None and limit < 1:
            raise InvalidParamsError("limit: must be a positive integer", data={"field": "limit"})
        if offset < 0:
            raise InvalidParamsError("offset: must be >= 0", data={"field": "offset"})
        rows, total = await self.run_read(
            lambda s: s.list_sessions_page(
                metadata=metadata, limit=limit, offset=offset, only=only, after=after, count=count
            )
        )
        await self.retention.annotate(self, rows)  # budget, expires_at: as session.get
        return rows, total

    # -- writes the core plans: sessions, appended and imported events, a turn's end ----

    async def create_session(
        self, metadata: dict[str, Any] | None = None, session_id: str | None = None
    ) -> str:
        """Create a session and return its id (``ConflictError`` if the id exists)."""
        if session_id is not None:
            validate_new_session_id(session_id)  # it names the session's mirror folder
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidParamsError("metadata: must be an object")
        sid = session_id or str(uuid.uuid4())
        return await self.run_write(lambda s: s.create_session(metadata, sid))

    async def append_events(
        self,
        session_id: str,
        events: Sequence[SessionEvent],
        *,
        expected_last_seq: int | None = None,
        idempotency_key: str | None = None,
        usage: dict[str, Any] | None = None,
        model: str | None = None,
    ) -> AppendResult:
        """Append events atomically (all or none); the callers' seq and session_id are ignored.

        Ids and timestamps are kept when given, assigned otherwise. An empty list is a
        no-op (even for an unknown session). A repeated ``idempotency_key`` returns the
        first call's result without writing; an ``expected_last_seq`` that is not the
        session's last seq raises ``ConflictError`` with ``data["last_seq"]``. ``usage``
        (any provider shape) and ``model`` are stored with the last event, as
        ``persist_working_context`` stores a turn's (``budget_exceeded`` likewise).
        """
        plan = await off_loop_if_large(
            self.host.executor,
            plan_size(events),
            lambda: self.core.plan_events(
                session_id,
                events,
                expected_last_seq=expected_last_seq,
                idempotency_key=idempotency_key,
                usage=usage,
                model=model,
            ),
        )
        if plan.batch.writes_nothing:
            return await self.decide(lambda known: self.core.unwritten(plan, known))
        result = await self.commit(plan)
        recorded = plan.batch.usage
        if (
            recorded is not None
            and result.seqs
            and await self.usage.after_turn(self, session_id, recorded)
        ):
            result = msgspec.structs.replace(result, budget_exceeded=True)
        return result

    async def import_events(
        self,
        events: Sequence[SessionEvent],
        *,
        session_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> tuple[str, AppendResult]:
        """Create a session holding ``events`` in one transaction (all of it, or nothing)."""
        if session_id is not None:
            validate_new_session_id(session_id)
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidParamsError("metadata: must be an object")
        sid = session_id or str(uuid.uuid4())
        create = NewSession(self.agent_id, metadata)
        # An import is planned as an append is: a folder of many events on a worker.
        plan = await off_loop_if_large(
            self.host.executor,
            plan_size(events),
            lambda: self.core.plan_events(sid, events, create=create),
        )
        return sid, await self.commit(plan)

    async def persist_working_context(
        self,
        session_id: str,
        ctx: WorkingContext,
        *,
        idempotency_key: str | None = None,
        usage: dict[str, Any] | None = None,
        on_conflict: Literal["append", "reject"] = "append",
        strategy: Mapping[str, Any] | None = None,
        model: str | None = None,
    ) -> AppendResult:
        """Write exactly ``ctx.get_new_messages()`` as events, in one transaction.

        ``on_conflict="reject"`` fails with ``ConflictError`` (writing nothing) when the
        session moved past ``ctx.base_seq``; ``"append"`` appends after whatever is there.
        The session's pressure flag is set when the prompt size calls for compaction under
        the effective strategy (``strategy`` is the request level): the size ``usage``
        reports in any provider shape, or the server's own count of the context. A flag
        set under ``summarize`` starts the summary in the background at once. The end of
        the turn writes ``working_context_snapshot.json`` (with the mirror on).
        ``usage`` (any provider shape) is stored with the turn, with ``model``; the answer's
        ``budget_exceeded`` says the session or agent is now past its budget.
        """
        return await _persist(
            self, session_id, ctx, idempotency_key, usage, on_conflict, strategy, False, None,
            model,
        )  # fmt: skip

    # -- edits beside the turn path: each alone through ``run_write``, then the core's
    # cache, the mirror and the subscribers are told what changed ---------------------

    def events_removed(self, store: AgentStore, session_id: str) -> None:
        """After a transaction that removed or rewrote events of ``session_id`` and marked
        its mirror stale (``sqlite_ops.invalidate_mirror``), still under the write lock:
        the caches forget the session, plans derived from its events before the removal
        are refused (``AgentCore.removal_conflict``), and the mirror's repair is scheduled
        (its snapshot file removed first). Every removal (delete, pop, clear; a rewind
        that erases, an expiry) ends with this, so that nothing removed is served, also
        after a crash at any moment after the answer."""
        self.core.events_deleted(session_id)
        self.mirror.events_deleted(store, session_id)

    async def delete_session(self, session_id: str) -> bool:
        """Delete a session and its events in one transaction; False if it did not exist.
        Its usage goes with it (and from the agent's totals)."""
        return bool(await self.delete_sessions([session_id]))

    async def delete_sessions(self, session_ids: Sequence[str]) -> list[str]:
        """Delete sessions as ``delete_session`` does, all in one transaction (a retention
        sweep's batch); the ids that existed (``runtime/session_erasure``)."""
        return await delete_sessions(self, session_ids)

    async def import_rows(self, rows: SessionRows) -> None:
        """Write a whole session as it is (``values.session_rows``: checked first), in one
        transaction; its mirror files are written from it right after the commit."""
        validate_new_session_id(rows.session.id)
        # Linear in the rows (every event decoded): on a worker, not the event loop.
        await self.host.executor.run(check_rows, rows)

        async def write(store: AgentStore) -> None:
            await store.insert_session_rows(rows)
            await self.mirror.ensure_active(store, rows.session.id)

        await self.run_write(write)

    async def delete_events(self, session_id: str, event_ids: Sequence[str]) -> int:
        """Delete events of this session by id (unknown ids ignored); returns how many."""

        async def write(store: AgentStore) -> int:
            count = await store.delete_events(session_id, list(event_ids))
            if count:
                self.events_removed(store, session_id)
            return count

        return await self.run_write(write)

    async def update_session(
        self, session_id: str, metadata: dict[str, Any] | None, *, merge: bool = False
    ) -> dict[str, Any]:
        """Replace the session's metadata (``None`` clears it); with ``merge`` set only
        the given keys, atomically (``values.metadata_merge``). The updated session."""
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidParamsError("metadata: must be an object", data={"field": "metadata"})
        if merge and metadata is None:
            raise InvalidParamsError(
                "metadata: a merge needs an object of the keys to set", data={"field": "metadata"}
            )
        return await self.run_write(lambda s: s.replace_metadata(session_id, metadata, merge))

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
        checked: SessionEvent | None = None
        if replace_with is not None:
            checked = parse_event(msgspec.to_builtins(replace_with), "replace_with")
            if checked.action == "compaction":
                raise InvalidParamsError(
                    "replace_with.action: a popped event cannot become a compaction record",
                    data={"field": "replace_with.action"},
                )

        async def write(store: AgentStore) -> SessionEvent | None:
            # Counted once the store is active: the token encoding is loaded then (the
            # actor loads it off the loop before activating), so the loop never waits.
            replacement = None if checked is None else (checked, get_counter().count_event(checked))
            popped = await store.pop_event(session_id, event_id, replacement)
            if popped is not None:
                self.events_removed(store, session_id)
            return popped

        return await self.run_write(write)

    async def clear_session(self, session_id: str) -> int:
        """Delete every event of the session at once, keeping the session (its metadata
        and strategy); seqs are never reused. Returns how many events were deleted."""

        async def write(store: AgentStore) -> int:
            deleted = await store.clear_events(session_id)
            self.events_removed(store, session_id)
            return deleted

        return await self.run_write(write)

    # -- subscriptions -----------------------------------------------------------------

    def subscribe(
        self,
        session_id: str,
        callback: Subscriber,
        on_deleted: Callable[[], None] | None = None,
        on_rewound: Callable[[int, int], None] | None = None,
    ) -> Callable[[], None]:
        """Call ``callback(events)`` after every committed append to ``session_id``,
        ``on_deleted()`` once when the session is deleted (the subscription ends then),
        and ``on_rewound(to_seq, rewind_seq)`` after each rewind of it.

        Calls happen on the event loop, in seq order, while the write lock is still held,
        so no append can be missed or reordered. Returns the unsubscribe function.
        """
        return self.subscriptions.subscribe(session_id, callback, on_deleted, on_rewound)

    # -- branches (``runtime.branches``) -------------------------------------------------

    async def fork_session(
        self,
        session_id: str,
        *,
        at_seq: int | None = None,
        new_session_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> ForkResult:
        """A new session whose history is ``session_id``'s up to ``at_seq`` (default: all
        of it), compaction records included; the two diverge independently afterwards."""
        return await branches.fork(
            self, session_id, at_seq=at_seq, new_session_id=new_session_id, metadata=metadata
        )

    async def rewind_session(
        self, session_id: str, to_seq: int, *, reason: str | None = None, erase: bool = False
    ) -> RewindResult:
        """Make ``session_id`` continue from ``to_seq`` (a turn's start when inside one);
        the abandoned events become a branch, or are erased with ``erase``."""
        return await branches.rewind(self, session_id, to_seq, reason=reason, erase=erase)

    async def session_branches(self, session_id: str) -> list[Branch]:
        """The forks and rewind branches of ``session_id``, oldest first."""
        return await branches.branches(self, session_id)

    # -- live turns (``live_streams``) -----------------------------------------------------

    async def stream_open(
        self, session_id: str, *, base_seq: int | None = None, owner: object | None = None
    ) -> dict[str, Any]:
        """Open the session's live turn (or take it over, fencing the older producer):
        ``{stream_id, generation, cursor, base_seq}``."""
        return await self.streams.open(self, session_id, base_seq, owner)

    async def stream_append(
        self,
        stream_id: str,
        generation: int,
        chunks: list[Any],
        *,
        after_cursor: int | None = None,
    ) -> dict[str, Any]:
        """Store chunks of a live turn; ``{cursor}`` once they are committed."""
        return await self.streams.append(self, stream_id, generation, chunks, after_cursor)

    async def stream_close(
        self,
        stream_id: str,
        generation: int,
        messages: list[Any] | None = None,
        *,
        idempotency_key: str | None = None,
        usage: dict[str, Any] | None = None,
    ) -> AppendResult | None:
        """End a live turn: persist ``messages`` as the turn (with the end of the stream,
        in one transaction), or abandon it (``None``)."""
        return await self.streams.close(
            self, stream_id, generation, messages, idempotency_key=idempotency_key, usage=usage
        )

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
        return await self.decide(lambda known: self.core.view(session_id, limit, known))

    async def build_working_context(
        self,
        session_id: str,
        *,
        system_instructions: Iterable[str] | None = None,
        limit: int | None = None,
        strategy: dict[str, Any] | None = None,
        may_compact: bool = True,
        override_budget: bool = False,
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
        A session past its budget (or its agent's) is refused with
        ``BudgetExceededError`` unless ``override_budget``.
        """
        await self.usage.check_build(self, session_id, override_budget)
        return await self.compactions.build(
            self,
            session_id,
            list(system_instructions or []),
            limit,
            strategy,
            may_compact=may_compact,
        )

    async def current_context(self, session_id: str) -> WorkingContext:
        """The default context as it stands, read only: never compacts (e.g. exports)."""
        return await self.compactions.build(self, session_id, [], None, None, may_compact=False)

    # -- compaction strategies ---------------------------------------------------------------

    async def get_strategy(self, session_id: str | None = None) -> dict[str, Any]:
        """``{server, agent, session, effective}`` strategies (session None: the agent's)."""
        return await self.decide(lambda known: self.core.strategy_levels(session_id, known))

    async def set_strategy(
        self, strategy: dict[str, Any] | None, session_id: str | None = None
    ) -> dict[str, Any]:
        """Persist a strategy for a session (or the agent default); ``None`` clears it.

        Only the keys given are stored (``None`` or ``{}`` clears the level); the merged
        result must still be valid, so a refused strategy is never stored.
        """
        write = await self.decide(lambda known: self.core.plan_strategy(strategy, session_id))
        await self.run_write(lambda s: self._store_strategy(s, write))
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
        due = await self.decide(
            lambda known: self.core.plan_compact(
                session_id, known, strategy=strategy, instructions=instructions
            )
        )
        return compaction_report(await self.compactions.compaction(self, due))

    # -- memory blocks (``memory_blocks.MemoryBlocks``) ---------------------------------

    async def set_block(
        self,
        label: str,
        value: str,
        *,
        session_id: str | None = None,
        description: str | None = None,
        max_tokens: int | None = None,
        reason: str | None = None,
        expected_revision: int | None = None,
        author: Author = "client",
    ) -> BlockRevision:
        """Write a new revision of a block (the agent's, or ``session_id``'s); refused past
        ``max_tokens`` (-32602) or when ``expected_revision`` is stale (-32002)."""
        return await self.blocks.set(
            self,
            label,
            value,
            session_id=session_id,
            description=description,
            max_tokens=max_tokens,
            reason=reason,
            expected_revision=expected_revision,
            author=author,
        )

    async def get_block(self, label: str, session_id: str | None = None) -> BlockRevision:
        """The block's current revision (-32001 when it has none)."""
        return await self.blocks.get(self, label, session_id)

    async def list_blocks(self, session_id: str | None = None) -> BlockSet:
        """The agent's current blocks and, with ``session_id``, the session's."""
        return await self.blocks.current(self, session_id)

    async def block_history(
        self,
        label: str,
        session_id: str | None = None,
        *,
        before_revision: int | None = None,
        limit: int = 100,
    ) -> list[BlockRevision]:
        """The block's revisions, newest first (``before_revision``: the next page)."""
        return await self.blocks.history(
            self, label, session_id, before_revision=before_revision, limit=limit
        )

    async def revert_block(
        self,
        label: str,
        revision: int,
        *,
        session_id: str | None = None,
        reason: str | None = None,
        expected_revision: int | None = None,
        author: Author = "client",
    ) -> BlockRevision:
        """A new revision equal to ``revision``; nothing is rewritten."""
        return await self.blocks.revert(
            self,
            label,
            revision,
            session_id=session_id,
            reason=reason,
            expected_revision=expected_revision,
            author=author,
        )

    async def delete_block(self, label: str, session_id: str | None = None) -> bool:
        """Erase every revision of the block (as ``events.delete`` erases)."""
        return await self.blocks.delete(self, label, session_id)

    async def run_block_tool(
        self,
        session_id: str,
        name: str,
        arguments: Any,
        tool_call_id: str | None = None,
    ) -> tuple[str, bool]:
        """Run one model tool call (``values.block_tools.BLOCK_TOOLS``) for
        ``session_id``: ``(content, is_error)``; each write is a revision with author
        ``model`` and ``tool_call_id``."""
        return await self.blocks.run_tool(self, session_id, name, arguments, tool_call_id)

    # -- sessions: what usage and retention add to them ------------------------------------

    async def get_session(self, session_id: str) -> dict[str, Any] | None:
        """The session object, with ``budget`` and ``expires_at`` (ms, or ``None``)."""
        row = await self.stored_session(session_id)
        if row is not None:
            row["budget"] = budget_json(await self.usage.session_budget(self, session_id))
            row["expires_at"] = await self.retention.expires(self, session_id)
        return row

    # -- usage and budgets (``usage_ledger``) -------------------------------------------

    async def memory_usage(
        self,
        *,
        session_id: str | None = None,
        since: int | None = None,
        until: int | None = None,
        group_by: GroupBy = None,
    ) -> dict[str, Any]:
        """Usage totals of the agent or one session (``memory.usage``)."""
        return await self.usage.usage(
            self, session_id=session_id, since=since, until=until, group_by=group_by
        )

    async def usage_chart(self, session_id: str, limit: int = 500) -> dict[str, Any]:
        """A session's newest turns with their usage, its compactions, totals and budget."""
        return await self.usage.chart(self, session_id, limit)

    async def set_budget(self, budget: dict[str, Any] | None) -> dict[str, Any]:
        """Store the agent's budget (``None`` clears it): ``{budget}``."""
        return await self.usage.set_agent_budget(self, budget)

    async def get_budget(self) -> dict[str, Any]:
        """The agent's budget: ``{budget}``."""
        return {"budget": budget_json(await self.usage.agent_budget(self))}

    async def set_session_budget(
        self, session_id: str, budget: dict[str, Any] | None
    ) -> dict[str, Any]:
        """Store a session's budget (``None`` clears it); the session object."""
        await self.usage.set_session_budget(self, session_id, budget)
        row = await self.get_session(session_id)
        if row is None:
            raise NotFoundError.session(session_id)
        return row

    # -- retention (``retention_keeper``) ---------------------------------------------

    async def retention_get(self, session_id: str | None = None) -> dict[str, Any]:
        return await self.retention.get(self, session_id)

    async def retention_set(
        self, policy: dict[str, Any] | None, session_id: str | None = None
    ) -> dict[str, Any]:
        return await self.retention.set(self, policy, session_id)

    async def retention_preview(
        self, policy: dict[str, Any] | None = None, session_id: str | None = None
    ) -> dict[str, Any]:
        return await self.retention.preview(self, policy=policy, session_id=session_id)

    async def sweep_retention(
        self, *, now_ms: int | None = None, max_steps: int | None = None
    ) -> dict[str, Any]:
        """Apply the stored retention policies now (the registry's sweeper calls this)."""
        return await self.retention.sweep(self, now_ms=now_ms, max_steps=max_steps)

    # -- recall (``runtime/recall.py``, ``runtime/model_tools.py``) ----------------------

    async def search(
        self,
        query: str,
        *,
        session_id: str | None = None,
        limit: int = 10,
        after_seq: int | None = None,
        before_seq: int | None = None,
        actions: Iterable[str] | None = None,
        sessions: Iterable[str] | None = None,
    ) -> dict[str, Any]:
        """Full-text search over the agent's events: ``{hits, indexing}`` (``memory.search``)."""
        return await self.recall.search(
            self,
            query,
            session_id=session_id,
            limit=limit,
            after_seq=after_seq,
            before_seq=before_seq,
            actions=actions,
            sessions=sessions,
        )

    async def expand(
        self, session_id: str, from_seq: int, to_seq: int, *, limit: int = 200
    ) -> dict[str, Any]:
        """The raw events of a seq range and their messages (``memory.expand``)."""
        return await self.recall.expand(self, session_id, from_seq, to_seq, limit=limit)

    async def reindex(self) -> int:
        """Rebuild the recall index (in the background); the number of events to index."""
        return await self.recall.reindex(self)

    async def recall_settled(self) -> None:
        """Wait until the background indexing that is running (if any) ends."""
        await self.recall.settled()

    def memory_tools(self, adapter: str) -> list[dict[str, Any]]:
        """The model tools in ``adapter``'s format (``memory.tools``)."""
        return tool_definitions(adapter, (tool.spec for tool in MODEL_TOOLS.values()))

    async def tool_call(
        self,
        session_id: str,
        name: str,
        arguments: Any,
        *,
        sessions: Iterable[str] | None = None,
        tool_call_id: str | None = None,
    ) -> dict[str, Any]:
        """Run one model tool: ``{content, is_error}`` (``memory.tool_call``); a memory
        block it writes records ``tool_call_id``."""
        only = None if sessions is None else frozenset(sessions)
        return await call_tool(
            self, session_id, name, arguments, sessions=only, tool_call_id=tool_call_id
        )
