"""``SessionEdits``: the actor's writes beside the turn path (I/O shell).

A mixin of ``AgentActor``: each edit runs alone through the actor's ``run_write`` (its
mailbox, under the write lock, completing even when the caller is cancelled), then tells
the core's cache, the mirror and the subscribers what changed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

import msgspec

from ..core.agent_core import AgentCore
from ..mirror_io.writer import validate_new_session_id
from ..storage.store import AgentStore
from ..values.errors import InvalidParamsError
from ..values.events import SessionEvent
from ..values.session_rows import SessionRows, check_rows
from ..values.tokens import get_counter
from ..values.validation import parse_event
from .mirror_link import MirrorLink
from .off_loop import ExecutorHost
from .subscriptions import Subscriptions

__all__ = ["EditRunner", "SessionEdits"]

T = TypeVar("T")


class EditRunner(Protocol):
    """What the edits need of their actor."""

    @property
    def core(self) -> AgentCore: ...

    @property
    def host(self) -> ExecutorHost: ...

    @property
    def mirror(self) -> MirrorLink: ...

    @property
    def subscriptions(self) -> Subscriptions: ...

    async def run_write(self, fn: Callable[[AgentStore], Awaitable[T]]) -> T: ...

    def events_removed(self, store: AgentStore, session_id: str) -> None: ...


class SessionEdits:
    """Delete, clear, pop, re-describe and import whole sessions."""

    def events_removed(self: EditRunner, store: AgentStore, session_id: str) -> None:
        """After a transaction that removed or rewrote events of ``session_id`` and marked
        its mirror stale (``sqlite_ops.invalidate_mirror``), still under the write lock:
        the caches forget the session, plans derived from its events before the removal
        are refused (``AgentCore.removal_conflict``), and the mirror's repair is scheduled
        (its snapshot file removed first). Every removal (delete, pop, clear; a rewind
        that erases, an expiry) ends with this, so that nothing removed is served, also
        after a crash at any moment after the answer."""
        self.core.events_deleted(session_id)
        self.mirror.events_deleted(store, session_id)

    async def delete_session(self: EditRunner, session_id: str) -> bool:
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
                self.subscriptions.publish_deleted(session_id)
            return deleted

        return await self.run_write(write)

    async def import_rows(self: EditRunner, rows: SessionRows) -> None:
        """Write a whole session as it is (``values.session_rows``: checked first), in one
        transaction; its mirror files are written from it right after the commit."""
        validate_new_session_id(rows.session.id)
        # Linear in the rows (every event decoded): on a worker, not the event loop.
        await self.host.executor.run(check_rows, rows)

        async def write(store: AgentStore) -> None:
            await store.insert_session_rows(rows)
            await self.mirror.ensure_active(store, rows.session.id)

        await self.run_write(write)

    async def delete_events(self: EditRunner, session_id: str, event_ids: Sequence[str]) -> int:
        """Delete events of this session by id (unknown ids ignored); returns how many."""

        async def write(store: AgentStore) -> int:
            count = await store.delete_events(session_id, list(event_ids))
            if count:
                self.events_removed(store, session_id)
            return count

        return await self.run_write(write)

    async def update_session(
        self: EditRunner, session_id: str, metadata: dict[str, Any] | None
    ) -> dict[str, Any]:
        """Replace the session's metadata (``None`` clears it); the updated session."""
        if metadata is not None and not isinstance(metadata, dict):
            raise InvalidParamsError("metadata: must be an object", data={"field": "metadata"})
        return await self.run_write(lambda s: s.replace_metadata(session_id, metadata))

    async def pop_event(
        self: EditRunner,
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

    async def clear_session(self: EditRunner, session_id: str) -> int:
        """Delete every event of the session at once, keeping the session (its metadata
        and strategy); seqs are never reused. Returns how many events were deleted."""

        async def write(store: AgentStore) -> int:
            deleted = await store.clear_events(session_id)
            self.events_removed(store, session_id)
            return deleted

        return await self.run_write(write)
