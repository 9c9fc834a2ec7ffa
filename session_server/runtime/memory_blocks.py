"""``MemoryBlocks``: an agent's memory blocks, read and written (I/O shell).

The rules are pure (``values.blocks``: bounds and rendering; ``values.block_tools``: the
model's edits); the SQL is ``storage.block_sql``. Writes go through the actor's mailbox
(``run_write``), so they are ordered with every other write of the agent and answered
after their commit; each one then drops what the core's block cache held for its scope
(``BlockCache.written``), so the next build renders the new value. Values are counted
with the real tokenizer, off the event loop when large.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar

from ..concurrency.worker_threads import WorkerThreads
from ..core.block_cache import BlockCache
from ..mirror_io.block_files import append_revision, drop_label, write_blocks_file
from ..storage.block_sql import (
    BlockWrite,
    all_revisions,
    block_history,
    current_block,
    current_blocks,
    delete_block,
    insert_revisions,
    write_revision,
)
from ..storage.store import AgentStore
from ..values.block_tools import BlockToolError, plan_block_edit
from ..values.blocks import (
    DEFAULT_BLOCK_TOKENS,
    MAX_HISTORY_PAGE,
    Author,
    BlockRevision,
    BlockSet,
    check_description,
    check_label,
    check_max_tokens,
    check_reason,
    check_value_chars,
    check_value_tokens,
    render_blocks,
)
from ..values.errors import ConflictError, InvalidParamsError, NotFoundError
from ..values.tokens import get_counter
from .off_loop import LARGE_CONTENT_CHARS, on_worker

__all__ = ["BlockPump", "MemoryBlocks", "read_for_build", "remember_count"]

T = TypeVar("T")

# A model's edit re-read and retried this many times when another write of the same
# block lands between its read and its write.
_TOOL_ATTEMPTS: Final = 3


class BlockPump(Protocol):
    """What ``MemoryBlocks`` needs of its actor."""

    async def run_read(self, fn: Callable[[AgentStore], Awaitable[T]]) -> T: ...

    async def run_write(self, fn: Callable[[AgentStore], Awaitable[T]]) -> T: ...


def read_for_build(conn: sqlite3.Connection, session_id: str) -> tuple[BlockSet, str, int]:
    """The blocks a build of ``session_id`` renders (``NeedBlocks``), with their text
    under no pin and its token count, taken here on the store's thread: the loop then
    finds the count remembered (``remember_count``) instead of tokenising the text."""
    blocks = current_blocks(conn, session_id)
    text = render_blocks(blocks)
    return blocks, text, get_counter().count(text)


def remember_count(text: str, tokens: int) -> None:
    """Make ``count_instruction(text)`` answer ``tokens`` without counting (on the loop)."""
    if text:
        counter = get_counter()
        counter.pin_instructions({text: tokens})
        counter.unpin_instructions({text: tokens})  # remembered as any count is


def _not_found(label: str, session_id: str | None) -> NotFoundError:
    where = "the agent" if session_id is None else f"session {session_id!r}"
    return NotFoundError(
        f"label: no memory block {label!r} in {where}",
        data={"field": "label", "label": label, "session_id": session_id},
    )


class BlockMirror(Protocol):
    """What ``MemoryBlocks`` needs of the agent's mirror (``MirrorLink``)."""

    @property
    def enabled(self) -> bool: ...

    def session_dir(self, session_id: str) -> Path: ...

    def run_later(self, fn: Callable[[], object]) -> None: ...

    async def drain(self) -> None: ...


class MemoryBlocks:
    """The block operations of one agent (``AgentActor`` delegates to it).

    The mirror gets ``blocks.jsonl`` in the agent's folder (agent blocks) and in each
    session's folder: a line per revision, appended after its commit in commit order; a
    deleted block's lines are removed from the file before its delete commits (a crash
    between leaves the mirror short of a block SQLite still has, never the reverse).
    """

    def __init__(
        self, cache: BlockCache, executor: WorkerThreads, mirror: BlockMirror, agent_dir: Path
    ) -> None:
        self.cache = cache
        self.executor = executor
        self.mirror = mirror
        self.agent_dir = agent_dir

    def _folder(self, session_id: str | None) -> Path:
        return self.agent_dir if session_id is None else self.mirror.session_dir(session_id)

    async def _count(self, value: str) -> int:
        counter = get_counter()
        if len(value) < LARGE_CONTENT_CHARS:
            return counter.count(value)
        return await on_worker(self.executor, lambda: counter.count(value))

    async def _write(
        self, pump: BlockPump, write: BlockWrite, given_max: int | None
    ) -> BlockRevision:
        def body(conn: sqlite3.Connection) -> BlockRevision:
            current = current_block(conn, write.label, write.session_id)
            limit = given_max or (DEFAULT_BLOCK_TOKENS if current is None else current.max_tokens)
            check_value_tokens(write.tokens, limit)
            return write_revision(
                conn,
                BlockWrite(
                    label=write.label,
                    session_id=write.session_id,
                    value=write.value,
                    tokens=write.tokens,
                    description=write.description,
                    max_tokens=limit,
                    author=write.author,
                    reason=write.reason,
                    tool_call_id=write.tool_call_id,
                    expected_revision=write.expected_revision,
                ),
                current,
            )

        async def run(store: AgentStore) -> BlockRevision:
            rev = await store.transact("memory block write", body)
            self.cache.written(write.session_id)
            self.mirror.run_later(
                functools.partial(append_revision, self._folder(write.session_id), rev)
            )
            return rev

        return await pump.run_write(run)

    async def set(
        self,
        pump: BlockPump,
        label: str,
        value: str,
        *,
        session_id: str | None = None,
        description: str | None = None,
        max_tokens: int | None = None,
        reason: str | None = None,
        expected_revision: int | None = None,
        author: Author = "client",
        tool_call_id: str | None = None,
    ) -> BlockRevision:
        check_label(label)
        check_description(description)
        check_max_tokens(max_tokens)
        check_reason(reason)
        if not isinstance(value, str):
            raise InvalidParamsError("value: must be a string", data={"field": "value"})
        check_value_chars(value)
        if expected_revision is not None and expected_revision < 0:
            raise InvalidParamsError(
                "expected_revision: must be 0 or more", data={"field": "expected_revision"}
            )
        tokens = await self._count(value)
        if max_tokens is not None:
            check_value_tokens(tokens, max_tokens)
        write = BlockWrite(
            label=label,
            session_id=session_id,
            value=value,
            tokens=tokens,
            description=description,
            max_tokens=0,  # the writer's: given, else the block's, else the default
            author=author,
            reason=reason,
            tool_call_id=tool_call_id,
            expected_revision=expected_revision,
        )
        return await self._write(pump, write, max_tokens)

    async def get(self, pump: BlockPump, label: str, session_id: str | None) -> BlockRevision:
        check_label(label)
        block = await pump.run_read(
            lambda s: s.query(lambda c: current_block(c, label, session_id))
        )
        if block is None:
            raise _not_found(label, session_id)
        return block

    async def current(self, pump: BlockPump, session_id: str | None) -> BlockSet:
        def read(conn: sqlite3.Connection) -> BlockSet:
            if session_id is None:
                return BlockSet(current_blocks(conn, None).agent, ())
            if (
                conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
                is None
            ):
                raise NotFoundError.session(session_id)
            return current_blocks(conn, session_id)

        return await pump.run_read(lambda s: s.query(read))

    async def history(
        self,
        pump: BlockPump,
        label: str,
        session_id: str | None,
        *,
        before_revision: int | None = None,
        limit: int = 100,
    ) -> list[BlockRevision]:
        check_label(label)
        if not 1 <= limit <= MAX_HISTORY_PAGE:
            raise InvalidParamsError(
                f"limit: must be between 1 and {MAX_HISTORY_PAGE}", data={"field": "limit"}
            )
        revs = await pump.run_read(
            lambda s: s.query(
                lambda c: block_history(
                    c, label, session_id, before_revision=before_revision, limit=limit
                )
            )
        )
        if not revs and before_revision is None:
            raise _not_found(label, session_id)
        return revs

    async def revert(
        self,
        pump: BlockPump,
        label: str,
        revision: int,
        *,
        session_id: str | None = None,
        reason: str | None = None,
        expected_revision: int | None = None,
        author: Author = "client",
    ) -> BlockRevision:
        """A new revision equal to ``revision`` (value, description, limit)."""
        check_label(label)
        check_reason(reason)
        old = await pump.run_read(
            lambda s: s.query(
                lambda c: block_history(c, label, session_id, before_revision=revision + 1, limit=1)
            )
        )
        if not old or old[0].revision != revision:
            raise NotFoundError(
                f"revision: block {label!r} has no revision {revision}",
                data={"field": "revision", "label": label, "revision": revision},
            )
        target = old[0]
        write = BlockWrite(
            label=label,
            session_id=session_id,
            value=target.value,
            tokens=target.tokens,
            description=target.description,
            max_tokens=0,
            author=author,
            reason=reason if reason is not None else f"revert to revision {revision}",
            expected_revision=expected_revision,
        )
        return await self._write(pump, write, target.max_tokens)

    async def delete(self, pump: BlockPump, label: str, session_id: str | None) -> bool:
        """Erase every revision of the block; false when it had none."""
        check_label(label)

        async def run(store: AgentStore) -> bool:
            # The mirror first: once the delete is answered, no file holds the block.
            self.mirror.run_later(functools.partial(drop_label, self._folder(session_id), label))
            await self.mirror.drain()
            rows = await store.transact_erasing(
                "memory block delete", delete_block, label, session_id
            )
            self.cache.written(session_id)
            return rows > 0

        return await pump.run_write(run)

    async def revisions(self, pump: BlockPump, session_id: str | None) -> list[BlockRevision]:
        """Every revision of one scope's blocks, by label then revision (exports)."""
        return await pump.run_read(lambda s: s.query(lambda c: list(all_revisions(c, session_id))))

    async def import_revisions(
        self, pump: BlockPump, session_id: str | None, revisions: Sequence[BlockRevision]
    ) -> None:
        """Replace one scope's blocks by ``revisions`` (their history as it was), in one
        transaction (imports)."""

        def body(conn: sqlite3.Connection) -> int:
            scope = "" if session_id is None else session_id
            if session_id is not None and (
                conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
                is None
            ):
                raise NotFoundError.session(session_id)
            removed = conn.execute(
                "DELETE FROM memory_blocks WHERE session_id = ?", (scope,)
            ).rowcount
            insert_revisions(conn, list(revisions))
            return removed

        async def run(store: AgentStore) -> None:
            await store.transact_erasing("memory blocks import", body)
            self.cache.written(session_id)
            self.mirror.run_later(
                functools.partial(write_blocks_file, self._folder(session_id), list(revisions))
            )

        await pump.run_write(run)

    async def run_tool(
        self,
        pump: BlockPump,
        session_id: str,
        name: str,
        arguments: Mapping[str, Any] | object,
        tool_call_id: str | None,
    ) -> tuple[str, bool]:
        """One model tool call: ``(content, is_error)``; an error's content says what the
        model should do instead. An unknown session is the caller's error (raised)."""
        for _ in range(_TOOL_ATTEMPTS):
            blocks = await self.current(pump, session_id)
            try:
                edit = plan_block_edit(name, arguments, blocks)
            except BlockToolError as exc:
                return str(exc), True
            block = edit.block
            tokens = await self._count(edit.value)
            if tokens > block.max_tokens:
                return (
                    f"the new value of block {block.label!r} would be {tokens} tokens, past "
                    f"its limit of {block.max_tokens}; shorten it (or replace old text "
                    "instead of adding)",
                    True,
                )
            write = BlockWrite(
                label=block.label,
                session_id=block.session_id,
                value=edit.value,
                tokens=tokens,
                description=None,
                max_tokens=0,
                author="model",
                tool_call_id=tool_call_id,
                expected_revision=block.revision,
            )
            try:
                rev = await self._write(pump, write, block.max_tokens)
            except ConflictError:
                continue  # written meanwhile: plan the edit again on the new value
            return (
                f"memory block {rev.label!r} is now revision {rev.revision} "
                f"({rev.tokens:,} of {rev.max_tokens:,} tokens)",
                False,
            )
        return "the block kept changing while this edit was made; try again", True
