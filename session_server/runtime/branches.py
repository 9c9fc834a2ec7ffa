"""Fork and rewind a session, list its branches: the actor's side (I/O shell).

Each write runs alone through the actor's ``run_write`` (its mailbox, under the write
lock, completing even when the caller is cancelled) as one transaction
(``storage.branch_sql``); then, still under the lock, the caches forget the sessions it
changed, their mirror folders are re-rendered from SQLite (``events_removed``: the same
path as a delete's, so a crash before the files are rewritten is repaired on the next
activation), and a rewind is told to the session's subscribers.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from ..mirror_io.writer import validate_new_session_id
from ..storage.store import AgentStore
from ..values.branches import Branch, ForkResult, RewindResult
from ..values.codec import encode_json
from ..values.errors import InvalidParamsError
from .branch_blocks import blocks_branched, drop_erased_lines
from .memory_blocks import MemoryBlocks
from .subscriptions import Subscriptions

__all__ = ["MAX_REASON_CHARS", "BranchRunner", "branches", "fork", "rewind"]

T = TypeVar("T")

MAX_REASON_CHARS = 2000
"""The longest ``reason`` a rewind keeps."""


class BranchRunner(Protocol):
    """What the branch operations need of their actor."""

    @property
    def subscriptions(self) -> Subscriptions: ...

    @property
    def blocks(self) -> MemoryBlocks: ...

    async def run_write(self, fn: Callable[[AgentStore], Awaitable[T]]) -> T: ...

    async def run_read(self, fn: Callable[[AgentStore], Awaitable[T]]) -> T: ...

    def events_removed(self, store: AgentStore, session_id: str) -> None: ...


async def fork(
    runner: BranchRunner,
    session_id: str,
    *,
    at_seq: int | None = None,
    new_session_id: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> ForkResult:
    """A new session whose history is ``session_id``'s up to ``at_seq`` (default: all of
    it), compaction records included; its own events continue at ``at_seq + 1``.
    ``metadata`` omitted: the source's."""
    if new_session_id is not None:
        validate_new_session_id(new_session_id)  # it names the fork's mirror folder
    if metadata is not None and not isinstance(metadata, dict):
        raise InvalidParamsError("metadata: must be an object", data={"field": "metadata"})
    if at_seq is not None and (isinstance(at_seq, bool) or not isinstance(at_seq, int)):
        raise InvalidParamsError("at_seq: must be an integer", data={"field": "at_seq"})
    new_id = new_session_id or str(uuid.uuid4())
    meta = None if metadata is None else encode_json(metadata)

    async def write(store: AgentStore) -> ForkResult:
        result = await store.fork_session(
            session_id, new_id, at_seq, meta, inherit_metadata=metadata is None
        )
        runner.events_removed(store, new_id)  # its mirror folder, rendered from SQLite
        await blocks_branched(runner.blocks, store, [new_id])
        return result

    return await runner.run_write(write)


async def rewind(
    runner: BranchRunner,
    session_id: str,
    to_seq: int,
    *,
    reason: str | None = None,
    erase: bool = False,
) -> RewindResult:
    """Make ``session_id`` continue from ``to_seq``; the events after it move to a new
    branch (its id in the answer), or are erased with ``erase``."""
    if isinstance(to_seq, bool) or not isinstance(to_seq, int):
        raise InvalidParamsError("to_seq: must be an integer", data={"field": "to_seq"})
    if reason is not None and (not isinstance(reason, str) or len(reason) > MAX_REASON_CHARS):
        raise InvalidParamsError(
            f"reason: must be a string of at most {MAX_REASON_CHARS} characters",
            data={"field": "reason"},
        )
    branch_id = str(uuid.uuid4())

    async def write(store: AgentStore) -> RewindResult:
        if erase:  # the erased block revisions leave the mirror before the commit
            await drop_erased_lines(runner.blocks, store, session_id, to_seq)
        result = await store.rewind_session(
            session_id, to_seq, reason=reason, erase=erase, branch_id=branch_id
        )
        runner.events_removed(store, session_id)
        if result.branch_session_id is not None:
            runner.events_removed(store, result.branch_session_id)
        touched = (
            [session_id]
            if result.branch_session_id is None
            else [session_id, result.branch_session_id]
        )
        await blocks_branched(runner.blocks, store, touched)
        runner.subscriptions.publish_rewound(session_id, result.to_seq, result.rewind_seq)
        return result

    return await runner.run_write(write)


async def branches(runner: BranchRunner, session_id: str) -> list[Branch]:
    """The sessions forked from ``session_id``: forks and rewind branches, oldest first."""
    return await runner.run_read(lambda store: store.branches(session_id))
