"""``ActorRegistry``: activation, hibernation and the open-file bound (I/O shell).

There is one ``AgentActor`` per agent id per registry (so per process, when the process
uses one registry). Actors are cheap objects; what is bounded is the number whose SQLite
store is open: at most ``max_open``. Opening one more hibernates the least recently used
idle actor; actors idle for ``idle_timeout`` seconds are hibernated by a background sweep.
A hibernated actor re-opens on its next call.

The registry holds its actors weakly: an actor lives while its store is open (the
registry's open set holds it), while a call, a subscription or a background task holds
it, and no longer. A hibernated actor that nothing uses leaves memory, so the actors in
memory are bounded by the open stores plus the calls in flight, not by the agents ever
seen. Only ``get(..., create=True)`` (the writes that make an agent) may make a new agent
folder, and at most ``max_agents`` agents exist.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import os
import time
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

from prometheus_client import CollectorRegistry

from ..compaction import resolve_strategy, validate_strategy
from ..concurrency.worker_threads import WorkerThreads
from ..mirror_io.snapshot_index import SnapshotIndex
from ..process.limits import derive_limits
from ..process.ops_metrics import AgentCollector, OperationsMetrics
from ..process.usage_metrics import AgentLabel, UsageMetrics
from ..storage.idempotency import DEFAULT_RETENTION, IdempotencyRetention
from ..storage.store_connections import Synchronous
from ..storage.stored_rows import SKIPPED_RECORDS
from ..storage.turn_log import TurnLogSource
from ..values.agent_ids import validate_agent_id, validate_new_id
from ..values.cache_budget import DEFAULT_CACHE_BYTES, CacheBudget
from ..values.errors import (
    AgentUnavailableError,
    InvalidParamsError,
    NotFoundError,
    TooLargeError,
)
from ..values.streams import StreamLimits
from ..values.tokens import get_counter
from .actor import AgentActor
from .metrics import CompactionMetrics
from .retention_sweeper import RetentionSweeper
from .summarizers import Summarizer, default_summarizer
from .summary_backoffs import SummaryBackoffs
from .usage_ledger import UsageSettings

__all__ = ["DEFAULT_MAX_AGENTS", "ActorRegistry", "default_memory_dir"]

log = logging.getLogger(__name__)

MIRROR_THREADS = 2
"""Threads for mirror file I/O, shared by all agents (each agent's operations run one at a
time, in commit order): apart from the SQLite threads, so that mirror writes never delay a
commit. Measured with 64 connections over 16 agents at FULL, 600 turns/s offered: p99
33-35 ms with them apart, 39-100 ms sharing the SQLite threads."""

DEFAULT_MAX_AGENTS = 100_000
"""Agents (folders under ``<memory_dir>/agents``) a registry lets writes create in total."""


def default_memory_dir() -> Path:
    """``$SESSION_SERVER_MEMORY_DIR`` or ``./memory``."""
    return Path(os.environ.get("SESSION_SERVER_MEMORY_DIR") or "memory")


class ActorRegistry:
    """Owns the actors of one memory dir. Use ``async with ActorRegistry(dir) as reg``.

    Options: ``synchronous`` ("FULL" default, or "NORMAL"), ``idle_timeout`` seconds
    (default 300; ``None`` disables the sweep), ``max_open`` open stores (default
    derived from ``RLIMIT_NOFILE``, at most 256: see ``session_server.process.limits``),
    ``busy_timeout_ms`` (5000), ``context_limit`` (default window of
    ``build_working_context``, 200 events), ``mirror`` (keep the JSONL mirror, default
    True), ``io_threads`` (worker threads for SQLite calls, shared by all agents, 8),
    ``default_strategy`` (server default compaction strategy), ``summarizer`` (default:
    ``SESSION_SERVER_SUMMARIZER``, extractive), ``metrics`` (``CompactionMetrics``);
    ``operations`` (``OperationsMetrics``) is created on the same prometheus registry;
    ``readonly`` opens every store read-only, without the agent lock and without the
    mirror (for tools that read beside a running server; writes raise).
    ``compaction_wait`` (seconds a build waits for a summary before answering with the
    previous record, 2), ``compaction_timeout`` (seconds a background summary may take,
    120), ``summary_backoff`` (seconds before a failed summary is retried, doubling, 1).
    ``max_agents`` (agents that may exist in the memory dir, ``DEFAULT_MAX_AGENTS``): a
    write that would create one more is refused with ``TooLargeError``.
    ``idempotency`` (``IdempotencyRetention``: keys kept 24 h, at most 1000 per session):
    how long a keyed write can be replayed. ``turn_logs`` (cluster mode,
    ``runtime.cluster_node.ClusterNode``): each store's turn log, which claims the agent
    first (``None``, the default: single node). ``recent_cache_bytes``: what the actors'
    recent-events caches hold together (``DEFAULT_CACHE_BYTES``, 256 MiB; one session at
    most an eighth of it; see ``values.cache_budget``). ``stream_limits``: the bounds of
    live turns and the idle time after which an abandoned stream expires
    (``values.streams.StreamLimits``).
    """

    def __init__(
        self,
        memory_dir: str | os.PathLike[str] | None = None,
        *,
        synchronous: Synchronous = "FULL",
        idle_timeout: float | None = 300.0,
        max_open: int | None = None,
        busy_timeout_ms: int = 5000,
        context_limit: int = 200,
        mirror: bool = True,
        io_threads: int = 8,
        default_strategy: dict[str, Any] | None = None,
        summarizer: Summarizer | None = None,
        metrics: CompactionMetrics | None = None,
        readonly: bool = False,
        compaction_wait: float = 2.0,
        compaction_timeout: float = 120.0,
        summary_backoff: float = 1.0,
        index_owner: bool = True,
        max_agents: int = DEFAULT_MAX_AGENTS,
        idempotency: IdempotencyRetention = DEFAULT_RETENTION,
        recent_cache_bytes: int = DEFAULT_CACHE_BYTES,
        stream_limits: StreamLimits | None = None,
        usage: UsageSettings | None = None,
        retention_interval: float | None = None,
        turn_logs: TurnLogSource | None = None,
    ) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous: must be 'FULL' or 'NORMAL', got {synchronous!r}")
        if max_open is None:
            max_open = derive_limits().max_open_agents
        for name, value in (
            ("max_open", max_open),
            ("busy_timeout_ms", busy_timeout_ms),
            ("context_limit", context_limit),
            ("io_threads", io_threads),
            ("max_agents", max_agents),
        ):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name}: must be an int, got {type(value).__name__}")
            if value < 1:
                raise ValueError(f"{name}: must be at least 1, got {value}")
        for name, seconds in (
            ("compaction_wait", compaction_wait),
            ("compaction_timeout", compaction_timeout),
            ("summary_backoff", summary_backoff),
        ):
            if isinstance(seconds, bool) or not isinstance(seconds, int | float):
                raise TypeError(f"{name}: must be a number of seconds")
            if seconds <= 0:
                raise ValueError(f"{name}: must be positive, got {seconds}")
        self.compaction_wait = float(compaction_wait)
        self.compaction_timeout = float(compaction_timeout)
        self.summary_backoff = float(summary_backoff)
        # Failed summaries' backoffs, by agent and session: here, not in the actors, so
        # that a hibernated agent does not hit a summarizer that is down again at once.
        self.summary_backoffs = SummaryBackoffs(self.summary_backoff)
        if idle_timeout is not None and (
            isinstance(idle_timeout, bool) or not isinstance(idle_timeout, int | float)
        ):
            raise TypeError("idle_timeout: must be a number of seconds or None")
        self.memory_dir = Path(memory_dir) if memory_dir is not None else default_memory_dir()
        self.synchronous: Synchronous = synchronous
        self.idle_timeout = idle_timeout
        self.max_open = max_open
        self.max_agents = max_agents
        self.idempotency = idempotency
        self.stream_limits = stream_limits or StreamLimits()
        # Cluster mode (``runtime/cluster_node.py``): each store's turn log; ``None``: the
        # single-node default, no log.
        self.turn_logs = turn_logs
        # One budget for every actor's recent-events cache (``values.cache_budget``).
        self.cache_budget = CacheBudget(recent_cache_bytes)
        self.busy_timeout_ms = busy_timeout_ms
        self.context_limit = context_limit
        self.readonly = readonly
        self.mirror = mirror and not readonly  # the mirror is written by the lock holder
        # memory.list_snapshots reads this index; only the writer of the mirror keeps one.
        # ``index_owner=False``: a tool writing beside a server (it marks the index stale).
        self.snapshot_index = (
            SnapshotIndex(self.memory_dir, owner=index_owner) if self.mirror else None
        )
        # The server-wide default level of the strategy precedence; validated now.
        try:
            self.default_strategy = (
                validate_strategy(default_strategy, source="server strategy") or None
                if default_strategy
                else None
            )
            resolve_strategy(self.default_strategy)
        except InvalidParamsError as exc:
            raise ValueError(f"default_strategy: {exc.message}") from None
        self.summarizer: Summarizer = summarizer or default_summarizer()
        self.metrics = metrics or CompactionMetrics(CollectorRegistry())
        self.operations = OperationsMetrics(
            self.metrics.registry,
            open_agents=lambda: float(self.open_count),
            actors=lambda: float(self.actor_count),
            skipped_records=lambda: float(SKIPPED_RECORDS.count),
            recent_cache=(
                lambda: float(self.cache_budget.held),
                lambda: float(self.cache_budget.peak),
            ),
        )
        self.metrics.registry.register(
            AgentCollector(self._open_agent_ages, namespace=self.operations.namespace)
        )
        usage = usage or UsageSettings()
        if usage.metrics is None:
            metrics_of_usage = UsageMetrics(
                self.metrics.registry,
                namespace=self.operations.namespace,
                label=AgentLabel(usage.metrics_label),
            )
            usage = dataclasses.replace(usage, metrics=metrics_of_usage)
        self.usage_settings = usage
        self.retention_sweeper = (
            None
            if retention_interval is None or readonly
            else RetentionSweeper(
                self.list_agents_async, lambda a: self.get(a, create=False), retention_interval
            )
        )
        # SQLite calls run here, a whole transaction per call; the thread count is bounded
        # whatever the number of agents.
        self.executor = WorkerThreads(
            max_workers=max(1, io_threads), thread_name_prefix="session-server-sqlite"
        )
        # Mirror file I/O (trace lines, snapshots, streamed repairs) on threads of its own:
        # callers wait for commits, nobody waits for the mirror.
        self.mirror_executor = WorkerThreads(
            max_workers=MIRROR_THREADS, thread_name_prefix="session-server-mirror"
        )
        # Group commits take their later batches' token counts here, ahead of the writer
        # (``storage.group_counts``): one thread of its own, so a count never holds a
        # thread SQLite calls wait for, and a writer never waits for a count not started.
        self.count_executor = WorkerThreads(
            max_workers=1, thread_name_prefix="session-server-count"
        )
        # Load the token encoding now, beside start-up: the first commit counts its turn
        # and would otherwise wait for the load (and every caller queued behind it).
        self.executor.post(get_counter)
        # Weak: an actor leaves memory once nothing uses it (see the module doc). Strong
        # references: ``_open`` (open stores), ``_closing``, calls and subscriptions.
        self._actors: weakref.WeakValueDictionary[str, AgentActor] = weakref.WeakValueDictionary()
        # Agents folders counted at the first creation, and those created since.
        self._agent_count: int | None = None
        self._created: set[str] = set()
        self._count_gate = asyncio.Lock()
        self._open: OrderedDict[str, AgentActor] = OrderedDict()
        self._closing: set[AgentActor] = set()
        self._open_gate = asyncio.Lock()  # one store opens at a time: the bound is exact
        self._evictions: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self._is_closed = False

    async def __aenter__(self) -> ActorRegistry:
        if self.retention_sweeper is not None:  # retention runs with or without calls
            self.retention_sweeper.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def agent_dir(self, agent_id: str) -> Path:
        return self.memory_dir / "agents" / validate_agent_id(agent_id)

    async def get(self, agent_id: str, *, create: bool = True) -> AgentActor:
        """The actor of ``agent_id`` (validated and NFC-normalised before any file is
        touched).

        With ``create=False`` (reads) an agent without a store is ``NotFoundError`` and
        nothing is made. With ``create=True`` a new agent counts against ``max_agents``
        (``TooLargeError`` beyond it); its folder appears when its store first opens.
        """
        actor = self._actors.get(agent_id) if type(agent_id) is str else None
        if actor is not None and actor.is_open and not self._is_closed:
            # Every key is a validated id: finding one is its validation (each request
            # asks for its connection's actor; the check walked the id's characters).
            self._start_sweeper()
            return actor
        agent_id = validate_agent_id(agent_id)
        if self._is_closed:
            raise AgentUnavailableError("the registry is closed", data={"agent_id": agent_id})
        actor = self._actors.get(agent_id)
        if actor is None or not actor.is_open:
            # An actor in memory without a store may be what a refused create left (held
            # until the collector runs): its agent exists only if its file does.
            path = self.agent_dir(agent_id) / "agent.sqlite"
            if not path.exists():  # one stat, only when no actor is in memory
                # Cluster mode: an agent another node wrote has no file here yet; its
                # store rebuilds from the log when it opens.
                if not create and not (
                    self.turn_logs is not None and await self.turn_logs.known(agent_id)
                ):
                    raise NotFoundError.agent(agent_id)
                validate_new_id(agent_id)  # a new agent's id cannot pass for another
                await self._admit(agent_id)
                actor = self._actors.get(agent_id)  # another call may have made it meanwhile
        if actor is None:
            actor = AgentActor(
                self,
                agent_id,
                path,
                synchronous=self.synchronous,
                busy_timeout_ms=self.busy_timeout_ms,
                context_limit=self.context_limit,
            )
            self._actors[agent_id] = actor
        self._start_sweeper()
        return actor

    async def _admit(self, agent_id: str) -> None:
        """Count a new agent against ``max_agents`` (the folders are listed once, at the
        first creation, off the loop; later creations are counted here)."""
        if agent_id in self._created:
            return
        async with self._count_gate:
            if self._agent_count is None:
                self._agent_count = len(await self.list_agents_async())
            if agent_id in self._created:
                return
            if self._agent_count + len(self._created) >= self.max_agents:
                await self._recount()
            if self._agent_count + len(self._created) >= self.max_agents:
                raise TooLargeError(
                    f"agent_id: this server already holds {self.max_agents} agents (its "
                    f"max_agents); agent {agent_id!r} cannot be created",
                    data={"field": "agent_id", "max_agents": self.max_agents},
                )
            self._created.add(agent_id)

    async def _recount(self) -> None:
        """At the bound: count the folders again, and keep as created only the agents
        still being created (a create refused before its store opened made nothing, so
        it must not hold a place). The count gate is held."""
        folders = set(await self.list_agents_async())
        self._agent_count = len(folders)
        self._created = {
            agent_id
            for agent_id in self._created
            if agent_id not in folders
            and (actor := self._actors.get(agent_id)) is not None
            and (actor.busy or actor.is_open)
        }

    def has_actor(self, agent_id: str) -> bool:
        """Whether an actor object of ``agent_id`` is in memory (tests, diagnostics)."""
        return agent_id in self._actors

    @property
    def actor_count(self) -> int:
        """Actor objects in memory (open stores, calls in flight, subscriptions)."""
        return len(self._actors)

    def list_agents(self) -> list[str]:
        """Agent ids with a folder under ``<memory_dir>/agents``, sorted."""
        root = self.memory_dir / "agents"
        if not root.is_dir():
            return []
        return sorted(p.name for p in root.iterdir() if p.is_dir())

    async def list_agents_async(self) -> list[str]:
        """``list_agents`` on a worker thread (a directory listing: not on the loop)."""
        return await self.executor.run(self.list_agents)

    @property
    def open_count(self) -> int:
        return len(self._open)

    async def drain_mirrors(self) -> None:
        """Wait until the open agents' mirror writes are done (the folders then reflect
        every commit answered so far; closed agents have nothing pending)."""
        await asyncio.gather(*(a.mirror.drain() for a in list(self._open.values())))

    def open_agents(self) -> list[str]:
        """Ids of the agents whose store is open, least recently used first."""
        return list(self._open)

    def _open_agent_ages(self) -> list[tuple[str, float]]:
        now = time.monotonic()
        return [(a.agent_id, max(0.0, now - a.last_used)) for a in list(self._open.values())]

    # -- the actors' host (``ActorHost``): the open-store bound ------------------------------

    @contextlib.asynccontextmanager
    async def open_slot(self) -> AsyncIterator[None]:
        """Held while an actor opens its store: one at a time, so the bound is exact."""
        async with self._open_gate:
            # Close idle stores first, so the open-file bound holds at all times.
            await self._make_room()
            yield

    def store_opened(self, actor: AgentActor) -> None:
        self._open[actor.agent_id] = actor
        self._open.move_to_end(actor.agent_id)

    def store_used(self, actor: AgentActor) -> None:
        if actor.agent_id in self._open:
            self._open.move_to_end(actor.agent_id)

    def store_closed(self, actor: AgentActor) -> None:
        self._open.pop(actor.agent_id, None)

    def is_tracked(self, actor: AgentActor) -> bool:
        """Whether ``actor`` counts as open against ``max_open``."""
        return self._open.get(actor.agent_id) is actor

    def actor_idle(self) -> None:
        """Hibernate idle actors (in the background) while the bound is exceeded."""
        excess = len(self._open) - self.max_open
        if excess <= 0:
            return
        for actor in self._idle_open():
            if excess <= 0:
                break
            # It leaves ``_open`` when its store is really closed (``store_closed``); until
            # then it is counted, and a hibernate that finds it busy keeps it tracked.
            excess -= 1
            self._closing.add(actor)
            task = asyncio.ensure_future(actor.hibernate())
            self._evictions.add(task)
            task.add_done_callback(functools.partial(self._hibernated, actor))

    def _idle_open(self) -> Iterator[AgentActor]:
        """Open actors that may be hibernated now, least recently used first."""
        return (a for a in list(self._open.values()) if not a.busy and a not in self._closing)

    async def _make_room(self) -> None:
        """Hibernate least recently used idle actors until one more store fits the bound.

        Called under ``_open_gate`` before a store opens. When every open actor is busy
        the bound is exceeded until one goes idle (``actor_idle`` then closes it).
        """
        while len(self._open) >= self.max_open:
            victim = next(self._idle_open(), None)
            if victim is None:
                log.info("all %d open agents are busy; exceeding max_open", len(self._open))
                return
            self._closing.add(victim)
            try:
                await victim.hibernate()
            finally:
                self._closing.discard(victim)

    def _hibernated(self, actor: AgentActor, task: asyncio.Task[None]) -> None:
        self._closing.discard(actor)
        self._evictions.discard(task)
        _log_failure(task)

    def _start_sweeper(self) -> None:
        if self.retention_sweeper is not None and not self._is_closed:
            self.retention_sweeper.start()
        if self._sweeper is None and self.idle_timeout is not None:
            self._sweeper = asyncio.ensure_future(self._sweep())

    async def _sweep(self) -> None:
        assert self.idle_timeout is not None
        period = max(0.05, self.idle_timeout / 4)
        while True:
            await asyncio.sleep(period)
            await self.hibernate_idle()

    async def settle(self) -> None:
        """Wait for background evictions (actors over the bound that went idle)."""
        while self._evictions:
            await asyncio.gather(*list(self._evictions), return_exceptions=True)

    async def hibernate_idle(self, older_than: float | None = None) -> int:
        """Hibernate actors idle for more than ``older_than`` (default ``idle_timeout``) s."""
        limit = self.idle_timeout if older_than is None else older_than
        if limit is None:
            return 0
        now = time.monotonic()
        idle = [a for a in self._open.values() if not a.busy and now - a.last_used > limit]
        for actor in idle:
            await actor.hibernate()
        return len(idle)

    async def close(self) -> None:
        """Finish writes in flight and close every store."""
        self._is_closed = True
        if self.retention_sweeper is not None:
            await self.retention_sweeper.close()
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
            self._sweeper = None
        actors = list(self._actors.values())
        await asyncio.gather(*(a.close() for a in actors), return_exceptions=True)
        self._open.clear()
        if self.snapshot_index is not None:
            await self.executor.run(self.snapshot_index.close)
        self.executor.shutdown(wait=True)
        self.mirror_executor.shutdown(wait=True)
        self.count_executor.shutdown(wait=True)


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("hibernating an actor failed: %r", task.exception())
