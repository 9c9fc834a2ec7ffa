"""``SessionReads``: the actor's read paths straight to the store (I/O shell).

A mixin of ``AgentActor``: each read runs on the store's read-only connection through
the actor's ``run_read`` (counted as activity, the store opened when needed), sees the
last committed state and never waits for a write in progress.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from typing import Any, Protocol, TypeVar

from ..storage.store import AgentStore
from ..values.errors import InvalidParamsError, NotFoundError
from ..values.events import SessionEvent
from ..values.session_rows import SessionRows

__all__ = ["ReadRunner", "SessionReads"]

T = TypeVar("T")


class ReadRunner(Protocol):
    """What the reads need of their actor."""

    async def run_read(self, fn: Callable[[AgentStore], Awaitable[T]]) -> T: ...


class SessionReads:
    """Sessions and events as the store holds them (no core cache involved)."""

    async def get_session(self: ReadRunner, session_id: str) -> dict[str, Any] | None:
        return await self.run_read(lambda s: s.get_session(session_id))

    async def list_sessions(self: ReadRunner) -> list[dict[str, Any]]:
        """Sessions, most recently updated first."""
        return await self.run_read(lambda s: s.list_sessions())

    async def session_rows(self: ReadRunner, session_id: str) -> SessionRows:
        """Everything SQLite holds about the session (one snapshot); ``NotFoundError``."""
        rows = await self.run_read(lambda s: s.session_rows(session_id))
        if rows is None:
            raise NotFoundError.session(session_id)
        return rows

    async def load_events(
        self: ReadRunner,
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

    async def events_bytes(self: ReadRunner, session_id: str) -> int:
        """About how many bytes the session's events take in JSON (a lower bound of any
        answer or export that holds them all)."""
        return await self.run_read(lambda s: s.events_bytes(session_id))

    async def load_events_bounded(
        self: ReadRunner,
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
        self: ReadRunner,
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
        return await self.run_read(
            lambda s: s.list_sessions_page(
                metadata=metadata, limit=limit, offset=offset, only=only, after=after
            )
        )
