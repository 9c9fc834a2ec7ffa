"""``Recall``: an actor's full-text search, the raw events of a range, reindexing, and the
background indexing of a migrated file (I/O shell; docs/recall.md).

The index itself is SQLite's (the FTS5 shards ``events_fts_<n>``, kept by triggers in
every write); what runs
here is the backfill: the events a migration found (or a ``reindex`` emptied) are indexed
by a task of the actor, at most ``BACKFILL_ROWS`` per transaction, each queued in the
actor's mailbox like any write, so a client's writes wait at most one step; the steps are
paced (``values.recall_pacing``: each step is followed by a rest as long as it took) so
that other agents' calls keep most of the machine. The backfill's progress lives in the file (``recall_sql``): after a
crash the next activation goes on where the last committed step ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

import msgspec

from ..storage.recall_sql import RecallFilter
from ..values.codec import event_to_message
from ..values.errors import InvalidParamsError, NotFoundError
from ..values.recall import MAX_QUERY_CHARS, fts_query
from ..values.recall_pacing import STEP_ROWS, rest

if TYPE_CHECKING:
    from ..storage.store import AgentStore
    from ..values.events import SessionEvent

T = TypeVar("T")


class RecallActor(Protocol):
    """What ``Recall`` uses of its actor (``RecallActor`` is one)."""

    async def run_read(self, fn: Callable[[AgentStore], Awaitable[T]]) -> T: ...

    async def run_write(self, fn: Callable[[AgentStore], Awaitable[T]]) -> T: ...

    async def get_session(self, session_id: str) -> dict[str, Any] | None: ...

    async def load_events(
        self,
        session_id: str,
        *,
        limit: int | None = ...,
        tail: bool = ...,
        after_seq: int | None = ...,
    ) -> list[SessionEvent]: ...


__all__ = [
    "BACKFILL_ROWS",
    "MAX_EXPAND",
    "MAX_SEARCH_LIMIT",
    "Recall",
    "RecallActor",
]

log = logging.getLogger(__name__)

BACKFILL_ROWS: Final = STEP_ROWS
"""Events indexed per backfill transaction: a write of the agent waits at most one."""
MAX_SEARCH_LIMIT: Final = 50
MAX_EXPAND: Final = 1000
_ACTIONS: Final = frozenset(
    {
        "user_message",
        "agent_message",
        "tool_call_request",
        "tool_result",
        "system_instruction",
        "compaction",
    }
)


def _check_int(value: Any, field: str, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidParamsError(f"{field}: must be an integer", data={"field": field})
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise InvalidParamsError(f"{field}: must be {bound}, got {value}", data={"field": field})
    return value


class Recall:
    """One actor's recall operations; the actor is passed to each call (no reference
    back to it is kept beyond a running backfill)."""

    def __init__(self, agent_id: str, *, readonly: bool) -> None:
        self.agent_id = agent_id
        self.readonly = readonly
        self._task: asyncio.Task[None] | None = None

    # -- the backfill --------------------------------------------------------------------

    def activated(self, actor: RecallActor) -> None:
        """The actor opened its file: index what is still to index, in the background."""
        if self.readonly or (self._task is not None and not self._task.done()):
            return
        self._task = asyncio.get_running_loop().create_task(self._backfill(actor))

    async def _backfill(self, actor: RecallActor) -> None:
        try:
            if not await actor.run_read(lambda store: store.recall_pending()):
                return
            done = 0
            clock = asyncio.get_running_loop().time
            while True:
                started = clock()
                n = await actor.run_write(lambda store: store.recall_backfill(BACKFILL_ROWS))
                if not n:
                    break
                done += n
                # the other agents' share of the machine (``values.recall_pacing``)
                await asyncio.sleep(rest(clock() - started))
            if done:
                log.info("agent %r: recall index built (%d events)", self.agent_id, done)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the next activation tries again
            log.warning("agent %r: recall indexing stopped: %s", self.agent_id, exc)

    async def settled(self) -> None:
        """Wait for the running backfill (if any) to end."""
        task = self._task
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(task)

    async def cancel(self) -> None:
        """Stop the backfill (the step in flight completes: it is a queued write)."""
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def reindex(self, actor: RecallActor) -> int:
        """Empty the index and rebuild it in the background; the number of events."""
        await self.cancel()
        count: int = await actor.run_write(lambda store: store.recall_reset())
        self.activated(actor)
        return count

    # -- reads ---------------------------------------------------------------------------

    async def search(
        self,
        actor: RecallActor,
        query: str,
        *,
        session_id: str | None = None,
        limit: int = 10,
        after_seq: int | None = None,
        before_seq: int | None = None,
        actions: Iterable[str] | None = None,
        sessions: Iterable[str] | None = None,
    ) -> dict[str, Any]:
        """``{hits, indexing}`` (``memory.search``). ``sessions`` narrows the search to
        those sessions (a token limited to sessions)."""
        if not isinstance(query, str):
            raise InvalidParamsError("query: must be a string", data={"field": "query"})
        if len(query) > MAX_QUERY_CHARS * 10:
            raise InvalidParamsError(
                f"query: at most {MAX_QUERY_CHARS * 10} characters", data={"field": "query"}
            )
        _check_int(limit, "limit", 1, MAX_SEARCH_LIMIT)
        if after_seq is not None:
            _check_int(after_seq, "after_seq", 0)
        if before_seq is not None:
            _check_int(before_seq, "before_seq", 1)
        acts = None if actions is None else tuple(dict.fromkeys(actions))
        for action in acts or ():
            if action not in _ACTIONS:
                raise InvalidParamsError(
                    f"actions: unknown action {action!r}", data={"field": "actions"}
                )
        only = None if sessions is None else tuple(sessions)
        if session_id is not None and await actor.get_session(session_id) is None:
            raise NotFoundError.session(session_id)
        if session_id is not None:
            only = (session_id,) if only is None or session_id in only else ()
        expr = fts_query(query)
        if expr is None:
            indexing = await actor.run_read(lambda store: store.recall_pending())
            return {"hits": [], "indexing": indexing}
        flt = RecallFilter(expr, limit, only, after_seq, before_seq, acts)
        hits, indexing = await actor.run_read(lambda store: store.recall_search(flt))
        self.activated(actor)  # a file opened read-only elsewhere, a stopped backfill
        return {"hits": hits, "indexing": indexing}

    async def expand(
        self,
        actor: RecallActor,
        session_id: str,
        from_seq: int,
        to_seq: int,
        *,
        limit: int = 200,
    ) -> dict[str, Any]:
        """The raw events with ``from_seq <= seq <= to_seq`` (at most ``limit``, oldest
        first), compacted or not, and their context messages (``memory.expand``)."""
        _check_int(from_seq, "from_seq", 1)
        _check_int(to_seq, "to_seq", 1)
        _check_int(limit, "limit", 1, MAX_EXPAND)
        if to_seq < from_seq:
            raise InvalidParamsError(
                f"to_seq: {to_seq} is before from_seq {from_seq}", data={"field": "to_seq"}
            )
        if await actor.get_session(session_id) is None:
            raise NotFoundError.session(session_id)
        events = await actor.load_events(
            session_id, limit=min(limit, to_seq - from_seq + 1), tail=False, after_seq=from_seq - 1
        )
        events = [e for e in events if e.seq <= to_seq]
        messages = [m for m in map(event_to_message, events) if m is not None]
        return {
            "messages": msgspec.to_builtins(messages),
            "events": msgspec.to_builtins(events),
        }
