"""``AgentActor``: the single writer of one agent's memory (I/O shell).

Every write of an agent goes through the actor's mailbox (an ``asyncio.Lock`` taken in
FIFO order), so writes never interleave and seqs come out contiguous. A write runs in its
own task and the caller awaits it through ``asyncio.shield``: once started it completes
(committed or rolled back) even when the caller is cancelled or disconnects. An answer is
given only after the commit returned, that is after the data is durable at the configured
``synchronous`` level. Reads use a separate read-only connection and see the last
committed state without waiting for a write in progress.

The actor opens its store lazily and may be hibernated by the registry (store closed);
the next call re-opens it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import msgspec

from ..compaction import build_compacted_context
from ..core.codec import event_to_message, message_to_event, new_event_id
from ..core.context import WorkingContext
from ..core.errors import InvalidParamsError, NotFoundError
from ..core.events import ContextMessage, SessionEvent
from ..core.recent import RecentCache, SessionView
from ..core.tokens import get_counter
from ..core.validation import parse_event, parse_message
from ..mirror_io.writer import validate_session_id
from ..storage.store import AgentStore, AppendResult, Synchronous
from . import memory_ops
from .mirror_link import MirrorLink

if TYPE_CHECKING:
    from .registry import ActorRegistry

__all__ = ["AgentActor", "Subscriber"]

log = logging.getLogger(__name__)
T = TypeVar("T")
Subscriber = Callable[[list[SessionEvent]], None]


class AgentActor:
    """One agent's memory. Obtain it with ``await registry.get(agent_id)``."""

    def __init__(
        self,
        registry: ActorRegistry,
        agent_id: str,
        path: Path,
        *,
        synchronous: Synchronous,
        busy_timeout_ms: int,
        context_limit: int,
    ) -> None:
        self.registry = registry
        self.agent_id = agent_id
        self.path = path
        self.synchronous: Synchronous = synchronous
        self.busy_timeout_ms = busy_timeout_ms
        self.context_limit = context_limit
        self._store: AgentStore | None = None
        self._open_lock = asyncio.Lock()
        self._write_lock = asyncio.Lock()
        self._inflight = 0
        self._idle = asyncio.Event()  # set whenever the last activity in flight ends
        self._pending: set[asyncio.Task[Any]] = set()
        self._subscribers: dict[str, list[Subscriber]] = {}
        self.last_used = time.monotonic()
        self.mirror = MirrorLink(
            registry.memory_dir, agent_id, enabled=registry.mirror, executor=registry.executor
        )
        # Sessions whose context was built since activation (the snapshot cache is
        # consulted only for the first build of an activation).
        self._built: set[str] = set()
        # Recently written events per session, so building a context reads no row it
        # has already decoded (see ``recent``).
        self._recent = RecentCache(max(4 * context_limit, 256))
        # One compaction at a time per session: a pressure flag is acted on exactly once.
        self._compaction_locks: dict[str, asyncio.Lock] = {}
        self._agent_strategy: dict[str, Any] | None = None
        self._agent_strategy_loaded = False
        self._agent_strategy_generation = 0

    # -- lifecycle -------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._store is not None

    @property
    def busy(self) -> bool:
        return self._inflight > 0 or bool(self._pending) or self.mirror.busy

    async def _ensure_store(self) -> AgentStore:
        if self._store is not None:
            return self._store
        async with self._open_lock:
            if self._store is None:
                async with self.registry._open_gate:
                    # Close idle stores first, so the open-file bound holds at all times.
                    await self.registry._make_room()
                    self._store = await AgentStore.open(
                        self.path,
                        self.agent_id,
                        synchronous=self.synchronous,
                        busy_timeout_ms=self.busy_timeout_ms,
                        executor=self.registry.executor,
                    )
                    self.registry._opened(self)
                if self.mirror.enabled:
                    # Activation repairs mirrors left behind (or ahead) by a crash.
                    for session_id in await self._store.stale_mirrors():
                        await self.mirror.ensure_active(self._store, session_id)
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
                self.registry._touched(self)
                return
            await self.mirror.close(self._store)
            # Under the open lock: a call arriving now waits until the file (and its
            # agent lock) is really closed before it opens the store again.
            async with self._open_lock:
                if self._inflight > 0:  # a read started while the mirror was flushed
                    self.registry._touched(self)
                    return
                store, self._store = self._store, None
                if store is not None:
                    await store.close()
                    self.registry._closed(self)
            self._built.clear()
            self._recent.clear()
            self._agent_strategy_loaded = False
        self._agent_strategy_generation = 0

    async def close(self) -> None:
        """Wait for writes and reads in flight, then close the store."""
        while self._pending or self._inflight:
            if self._pending:
                await asyncio.gather(*list(self._pending), return_exceptions=True)
            else:
                self._idle.clear()
                await self._idle.wait()
        await self.hibernate()

    @contextlib.asynccontextmanager
    async def _activity(self) -> AsyncIterator[AgentStore]:
        self._inflight += 1
        self.last_used = time.monotonic()
        try:
            store = await self._ensure_store()
            self.registry._touched(self)
            yield store
        finally:
            self._inflight -= 1
            self.last_used = time.monotonic()
            if self._inflight == 0:
                self._idle.set()
                self.registry._evict()  # an actor skipped while busy may go now

    async def _read(self, fn: Callable[[AgentStore], Awaitable[T]]) -> T:
        async with self._activity() as store:
            return await fn(store)

    async def _write(self, fn: Callable[[AgentStore], Awaitable[T]]) -> T:
        """Run ``fn`` under the write lock in a task that survives caller cancellation."""

        async def run() -> T:
            async with self._write_lock, self._activity() as store:
                return await fn(store)

        task = asyncio.ensure_future(run())
        self._pending.add(task)
        task.add_done_callback(self._write_done)
        return await asyncio.shield(task)

    def _write_done(self, task: asyncio.Task[Any]) -> None:
        self._pending.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # Retrieved here so an abandoned write's error is not reported as unhandled;
            # the caller (if still waiting) gets it through the shield.
            log.debug("write on agent %r failed: %r", self.agent_id, task.exception())

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
            deleted = await store.delete_session(session_id)
            self.mirror.session_deleted(session_id)
            self._built.discard(session_id)
            self._recent.forget(session_id)
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
        return await self._append(
            session_id,
            list(events),
            expected_last_seq=expected_last_seq,
            idempotency_key=idempotency_key,
        )

    async def _append(
        self,
        session_id: str,
        events: list[SessionEvent],
        *,
        expected_last_seq: int | None = None,
        idempotency_key: str | None = None,
        compaction_required: bool | None = None,
        after_commit: Callable[[AppendResult], None] | None = None,
        create_metadata: dict[str, Any] | None = None,
        create: bool = False,
        token_counts: list[int] | None = None,
    ) -> AppendResult:
        """Append ``events``; ``token_counts`` given means the caller built the events
        from messages it validated (persist), so they are not checked a second time."""
        if (
            not events
            and compaction_required is None
            and idempotency_key is None
            and expected_last_seq is None
            and not create
        ):
            return AppendResult(seqs=[], last_seq=await self._last_seq_or_zero(session_id))
        if token_counts is None:
            # Structs are not validated on construction: check every event before writing.
            checked = [
                parse_event(msgspec.to_builtins(e), f"events[{i}]") for i, e in enumerate(events)
            ]
            counter = get_counter()
            tokens = [_event_tokens(counter, e) for e in checked]
        else:
            checked, tokens = events, token_counts
        prepared = [e if e.id else msgspec.structs.replace(e, id=new_event_id()) for e in checked]

        async def write(store: AgentStore) -> AppendResult:
            await self.mirror.ensure_active(store, session_id)
            result, stored, replay = await store.append_events(
                session_id,
                prepared,
                tokens,
                expected_last_seq=expected_last_seq,
                idempotency_key=idempotency_key,
                compaction_required=compaction_required,
                mirror_seq=self.mirror.cursor(session_id),
                create_metadata=create_metadata,
                create=create,
            )
            if stored and not replay:
                self._recent.appended(
                    session_id, stored, result.last_seq, result.compaction_required
                )
                self.mirror.appended(session_id, stored)
                self._publish(session_id, stored)
            elif compaction_required is not None and not replay:
                self._recent.flag_changed(session_id, result.compaction_required)
            if after_commit is not None and not replay:
                after_commit(result)
            return result

        return await self._write(write)

    async def _view(self, session_id: str, limit: int) -> SessionView:
        """The context window and session state, from the cache when it can answer."""
        view = self._recent.window(session_id, limit)
        if view is not None:
            self.last_used = time.monotonic()
            return view
        version = self._recent.version(session_id)
        window = await self._read(
            lambda s: s.context_window(session_id, limit=limit, from_record=True)
        )
        view = SessionView(
            events=window.events,
            last_seq=window.last_seq,
            record=window.record,
            compaction_required=window.compaction_required,
            strategy=window.strategy,
        )
        self._recent.seed(session_id, window.suffix, window.complete, view, version)
        return view

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
        sid = session_id or str(uuid.uuid4())
        result = await self._append(sid, list(events), create_metadata=metadata, create=True)
        return sid, result

    async def _last_seq_or_zero(self, session_id: str) -> int:
        state = await self._read(lambda s: s.session_state(session_id))
        return 0 if state is None else int(state["last_seq"])

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

    async def delete_events(self, session_id: str, event_ids: Sequence[str]) -> int:
        """Delete events of this session by id (unknown ids ignored); returns how many."""

        async def write(store: AgentStore) -> int:
            count = await store.delete_events(session_id, list(event_ids))
            if count:
                self._recent.forget(session_id)
                await self.mirror.events_deleted(store, session_id)
            return count

        return await self._write(write)

    # -- subscriptions -----------------------------------------------------------------

    def subscribe(self, session_id: str, callback: Subscriber) -> Callable[[], None]:
        """Call ``callback(events)`` after every committed append to ``session_id``.

        Calls happen on the event loop, in seq order, while the write lock is still held,
        so no append can be missed or reordered. Returns the unsubscribe function.
        """
        subs = self._subscribers.setdefault(session_id, [])
        subs.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                subs.remove(callback)
            if not subs:
                self._subscribers.pop(session_id, None)

        return unsubscribe

    def _publish(self, session_id: str, events: list[SessionEvent]) -> None:
        for callback in list(self._subscribers.get(session_id, ())):
            try:
                callback(events)
            except Exception:
                log.exception("subscriber of %r/%r failed", self.agent_id, session_id)

    # -- working contexts ----------------------------------------------------------------

    async def build_working_context(
        self,
        session_id: str,
        *,
        system_instructions: Iterable[str] | None = None,
        limit: int | None = None,
        strategy: dict[str, Any] | None = None,
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
        (exactly once). A summarizer failure raises ``SummarizerError`` and writes nothing.
        """
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise InvalidParamsError("limit: must be a positive integer")
        instructions = list(system_instructions or [])
        if limit is None and strategy is None and session_id not in self._built:
            # The first build after activation may come from working_context_snapshot.json.
            cached = await self._from_snapshot_cache(session_id, instructions)
            if cached is not None:
                return cached
        ctx = await memory_ops.build(
            self, session_id, instructions, limit or self.context_limit, strategy
        )
        self._built.add(session_id)
        return ctx

    # -- compaction strategies ---------------------------------------------------------------

    async def get_strategy(self, session_id: str | None = None) -> dict[str, Any]:
        """``{server, agent, session, effective}`` strategies (session None: the agent's)."""
        return await memory_ops.get_strategy(self, session_id)

    async def set_strategy(
        self, strategy: dict[str, Any] | None, session_id: str | None = None
    ) -> dict[str, Any]:
        """Persist a strategy for a session (or the agent default); ``None`` clears it."""
        return await memory_ops.set_strategy(self, strategy, session_id)

    async def compact(
        self,
        session_id: str,
        *,
        strategy: dict[str, Any] | None = None,
        system_instructions: Iterable[str] | None = None,
    ) -> dict[str, Any]:
        """Compact now with the effective strategy; ``compacted: false`` says why not."""
        return await memory_ops.compact(
            self,
            session_id,
            strategy=strategy,
            system_instructions=list(system_instructions or []),
            limit=self.context_limit,
        )

    async def _from_snapshot_cache(
        self, session_id: str, instructions: list[str]
    ) -> WorkingContext | None:
        """The context restored from ``working_context_snapshot.json`` when it is valid and
        current (its ``last_seq`` is the session's); ``None`` means: rebuild from SQLite."""
        if not self.mirror.enabled:
            return None
        state = await self._read(lambda s: s.session_state(session_id))
        if state is None or state["compaction_required"] or not state["last_seq"]:
            return None
        # Under a compaction strategy the build may have to compact first: no shortcut.
        if await memory_ops.effective_mode(self, state) != "none":
            return None
        restored = self.mirror.snapshot_cache(session_id, int(state["last_seq"]))
        if restored is None:
            return None
        self._built.add(session_id)
        counter = get_counter()
        return WorkingContext(
            instructions,
            restored.messages,
            {"restored_from": "working_context_snapshot.json"},
            base_seq=int(state["last_seq"]),
            token_count=counter.count_messages(restored.messages, instructions).tokens,
        )

    async def persist_working_context(
        self,
        session_id: str,
        ctx: WorkingContext,
        *,
        idempotency_key: str | None = None,
        usage: dict[str, Any] | None = None,
        on_conflict: Literal["append", "reject"] = "append",
    ) -> AppendResult:
        """Write exactly ``ctx.get_new_messages()`` as events, in one transaction.

        ``on_conflict="reject"`` fails with ``ConflictError`` (writing nothing) when the
        session moved past ``ctx.base_seq``; ``"append"`` appends after whatever is there.
        """
        if on_conflict not in ("append", "reject"):
            raise InvalidParamsError("on_conflict: must be 'append' or 'reject'")
        flag = await memory_ops.pressure_flag(self, session_id, usage)
        new = ctx.get_new_messages()
        checked = [
            parse_message(msgspec.to_builtins(m), f"messages[{i}]") for i, m in enumerate(new)
        ]
        events = [message_to_event(session_id, m) for m in checked]
        counter = get_counter()
        tokens = [int(counter.count_message(m)) for m in checked]
        expected = ctx.base_seq if on_conflict == "reject" else None
        if not events and expected is None and not flag:
            state = await self._read(lambda s: s.session_state(session_id))
            if state is None:
                raise NotFoundError.session(session_id)
            return AppendResult(
                seqs=[],
                last_seq=int(state["last_seq"]),
                compaction_required=bool(state["compaction_required"]),
            )
        instructions = list(ctx.system_instructions)

        def snapshot(result: AppendResult) -> None:
            # The end of a turn: the snapshot is the default context as SQLite now stands
            # (computed from the cache when the batch is written), not the caller's ctx,
            # which may hold only this turn or miss another writer's events.
            self.mirror.snapshot(session_id, lambda: self._snapshot_parts(session_id, instructions))

        return await self._append(
            session_id,
            events,
            expected_last_seq=expected,
            idempotency_key=idempotency_key,
            compaction_required=flag,
            after_commit=snapshot,
            token_counts=tokens,
        )

    def _snapshot_parts(
        self, session_id: str, instructions: list[str]
    ) -> tuple[list[ContextMessage], list[str], int] | None:
        """Messages, instructions and last seq of the default context, from the cache
        (``None`` when the cache cannot say: no snapshot is written then)."""
        view = self._recent.window(session_id, self.context_limit)
        if view is None:
            return None
        built = build_compacted_context(
            view.events, record=view.record, system_instructions=instructions
        )
        return built.messages, built.system_instructions, view.last_seq


def _event_tokens(counter: Any, event: SessionEvent) -> int:
    message = event_to_message(event)
    return 0 if message is None else int(counter.count_message(message))
