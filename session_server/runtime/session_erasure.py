"""Deleting sessions: the actor's side of ``session.delete`` and of a retention sweep's
batches (I/O shell).

One path for one session or many: a single write through the actor's ``run_write`` (its
mailbox, under the write lock, completing even when the caller is cancelled). The
snapshot index stops listing the sessions first (durable tombstones, so a crash cannot
list them again); one transaction deletes every row of each session
(``AgentStore.delete_sessions``: the statements of ``delete_session`` for each id, secure
delete), then the search index's postings are purged and the WAL truncated once
(``AgentStore._erase_after_delete``); the answer comes only once the mirror folders are
gone; the caches forget the sessions and their subscribers (live streams included) get
``session.deleted``. A process killed at any moment leaves each batch committed whole
or not at all; folders of sessions already deleted are swept at the next activation.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import NamedTuple, Protocol, TypeVar

from ..core.agent_core import AgentCore
from ..storage.store import AgentStore
from .mirror_link import MirrorLink
from .subscriptions import Subscriptions
from .usage_ledger import UsageLedger

__all__ = ["Erased", "ErasureHost", "delete_sessions", "erase_batch"]

T = TypeVar("T")


class ErasureHost(Protocol):
    """What a delete needs of its actor."""

    @property
    def core(self) -> AgentCore: ...

    @property
    def mirror(self) -> MirrorLink: ...

    @property
    def subscriptions(self) -> Subscriptions: ...

    @property
    def usage(self) -> UsageLedger: ...

    async def run_write(self, fn: Callable[[AgentStore], Awaitable[T]]) -> T: ...


async def delete_sessions(host: ErasureHost, session_ids: Sequence[str]) -> list[str]:
    """Delete ``session_ids`` (each with its events, usage, blocks, streams, mirror
    folder) in one transaction; the ids that existed, in the order given."""
    return (await erase_batch(host, session_ids)).deleted


class Erased(NamedTuple):
    """What ``erase_batch`` did: the ids that existed, and the seconds of the parts of
    its step that grow with the batch (the tombstones, the delete statements, the
    folders' moves; not the commit, the search index's purge or the WAL's truncation)."""

    deleted: list[str]
    seconds: float


async def erase_batch(host: ErasureHost, session_ids: Sequence[str]) -> Erased:
    """``delete_sessions``, with the time of the parts that grow with the batch (a
    sweep sizes its next batch by it)."""
    ids = list(dict.fromkeys(session_ids))
    if not ids:
        return Erased([], 0.0)

    async def write(store: AgentStore) -> Erased:
        started = time.perf_counter()
        await host.mirror.unlist(ids)  # listed no more, even after a crash
        unlisted = time.perf_counter() - started
        try:
            deleted, seconds = await store.delete_sessions(ids)
        except BaseException:
            await host.mirror.relist(ids)
            raise
        # Answered only once the folders are gone: a crash after the answer cannot
        # leave one for a view, a snapshot list or a new session of the same id.
        started = time.perf_counter()
        await host.mirror.sessions_deleted(ids)
        seconds += unlisted + time.perf_counter() - started
        gone = set(deleted)
        for sid in ids:
            host.core.session_deleted(sid)
            if sid in gone:
                host.subscriptions.publish_deleted(sid)
        return Erased(deleted, seconds)

    try:
        return await host.run_write(write)
    finally:
        for sid in ids:
            host.usage.forget(sid)
