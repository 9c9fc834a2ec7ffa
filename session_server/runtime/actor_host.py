"""``ActorHost``: what an ``AgentActor`` needs from the registry that hosts it (a
protocol: the registry is the one implementation, tests may give their own)."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ..concurrency.worker_threads import WorkerThreads
from ..mirror_io.snapshot_index import SnapshotIndex
from ..storage.idempotency import IdempotencyRetention
from ..storage.turn_log import TurnLogSource
from ..values.cache_budget import CacheBudget
from ..values.streams import StreamLimits
from .compaction_turns import CompactionHost
from .usage_ledger import UsageSettings

__all__ = ["ActorHost"]

# The hosted actor's type (``AgentActor``): a parameter, so that this module need not
# import the actor module, which imports it.
A = TypeVar("A", contravariant=True)


class ActorHost(CompactionHost, Protocol[A]):
    """What an actor needs from its owner (``ActorRegistry``): shared resources and the
    bookkeeping of the open-store bound, besides what its compactions need
    (``CompactionHost``: summarizer, metrics, summary timing)."""

    @property
    def memory_dir(self) -> Path: ...

    @property
    def mirror(self) -> bool: ...

    @property
    def usage_settings(self) -> UsageSettings:
        """Prices and usage metrics (``usage_ledger``), shared by all agents."""
        ...

    @property
    def count_executor(self) -> WorkerThreads:
        """A thread of its own where group commits take token counts ahead of the writer
        (``storage.group_counts``): never one SQLite calls wait for."""
        ...

    @property
    def mirror_executor(self) -> WorkerThreads:
        """Where mirror file I/O runs: threads of its own, so a burst of mirror writes or
        a streamed repair never holds the threads commits wait for."""
        ...

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
    def stream_limits(self) -> StreamLimits:
        """The bounds of live turns (``values.streams``)."""
        ...

    @property
    def turn_logs(self) -> TurnLogSource | None:
        """Cluster mode: where each store's turn log comes from (``None``: single node)."""
        ...

    @property
    def default_strategy(self) -> dict[str, Any] | None: ...

    @property
    def cache_budget(self) -> CacheBudget:
        """The bytes the recent-events caches of all the host's actors may hold."""
        ...

    def open_slot(self) -> AbstractAsyncContextManager[None]:
        """Held while a store opens: one at a time, with room made under the bound."""
        ...

    def store_opened(self, actor: A) -> None: ...

    def store_used(self, actor: A) -> None: ...

    def store_closed(self, actor: A) -> None: ...

    def actor_idle(self) -> None:
        """An actor's last activity ended: it may be hibernated if over the bound."""
        ...
