"""``ActivityScope``: ``async with`` around one activity of an actor (I/O shell).

``AgentActor._activity()`` gives one per read or write: ``begin`` counts the activity
in flight and gives the open store, ``end`` uncounts it. A plain class: it is entered by
every write and read, and the ``contextlib.asynccontextmanager`` it replaces cost twice
as much (an async generator per use, a ``StopAsyncIteration`` raised and caught on every
exit). It holds only the two callables, no state of its own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from ..storage.store import AgentStore

__all__ = ["ActivityScope"]


class ActivityScope:
    """``async with ActivityScope(begin, end) as store``: ``store = await begin()`` on
    entry (it undoes its own count when it fails), ``end()`` on exit, however it ends."""

    __slots__ = ("_begin", "_end")

    def __init__(self, begin: Callable[[], Awaitable[AgentStore]], end: Callable[[], None]) -> None:
        self._begin = begin
        self._end = end

    async def __aenter__(self) -> AgentStore:
        return await self._begin()

    async def __aexit__(self, *exc_info: object) -> None:
        self._end()
