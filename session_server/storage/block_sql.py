"""Transaction bodies and reads of memory blocks (I/O: run by ``AgentStore`` on its
worker thread, inside its transactions).

Every revision is a row of ``memory_blocks`` keyed by (scope, label, revision); the
agent's scope is ``''``. A write checks ``expected_revision`` and the per-scope block
bound inside its ``BEGIN IMMEDIATE`` transaction, so two writers never both win. A
delete removes every revision (the file has ``secure_delete`` on; the store then
truncates the WAL, as ``events.delete`` does).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from typing import Final

import msgspec

from ..values.blocks import (
    AGENT_SCOPE,
    MAX_BLOCKS_PER_SCOPE,
    MAX_SCOPE_TOKENS,
    Author,
    BlockRevision,
    BlockSet,
)
from ..values.errors import ConflictError, InvalidParamsError, NotFoundError

__all__ = [
    "BlockWrite",
    "all_revisions",
    "block_history",
    "current_block",
    "current_blocks",
    "delete_block",
    "insert_revisions",
    "write_revision",
]

_COLUMNS: Final = (
    "session_id, label, revision, value, description, max_tokens, tokens, author, reason,"
    " tool_call_id, session_seq, created_at"
)
# The current revision of each block of the scopes asked for (the partial head index).
_CURRENT: Final = (
    f"SELECT {_COLUMNS} FROM memory_blocks INDEXED BY idx_memory_blocks_head"
    " WHERE session_id IN (?, ?) AND head = 1"
    " ORDER BY session_id = '' DESC, label"
)
# The tokens of a scope's current blocks other than one label.
_OTHER_TOKENS: Final = (
    "SELECT COALESCE(SUM(tokens), 0) FROM memory_blocks INDEXED BY idx_memory_blocks_head"
    " WHERE session_id = ? AND head = 1 AND label != ?"
)


def _scope(session_id: str | None) -> str:
    return AGENT_SCOPE if session_id is None else session_id


def _revision(row: sqlite3.Row) -> BlockRevision:
    scope = str(row[0])
    return BlockRevision(
        label=str(row[1]),
        session_id=None if scope == AGENT_SCOPE else scope,
        revision=int(row[2]),
        value=str(row[3]),
        description=str(row[4]),
        max_tokens=int(row[5]),
        tokens=int(row[6]),
        author=row[7],
        reason=None if row[8] is None else str(row[8]),
        tool_call_id=None if row[9] is None else str(row[9]),
        session_seq=int(row[10]),
        created_at=int(row[11]),
    )


def _missing_table(exc: sqlite3.OperationalError) -> bool:
    """A file of schema 3 read without migrating (a read-only store) has no blocks."""
    text = str(exc)
    return "no such table: memory_blocks" in text or "no such index: idx_memory_blocks" in text


def current_blocks(conn: sqlite3.Connection, session_id: str | None) -> BlockSet:
    """The agent's current blocks and, with ``session_id``, the session's."""
    try:
        rows = conn.execute(_CURRENT, (AGENT_SCOPE, _scope(session_id))).fetchall()
    except sqlite3.OperationalError as exc:
        if _missing_table(exc):
            return BlockSet()
        raise
    revs = [_revision(r) for r in rows]
    return BlockSet(
        tuple(r for r in revs if r.session_id is None),
        tuple(r for r in revs if r.session_id is not None),
    )


def current_block(
    conn: sqlite3.Connection, label: str, session_id: str | None
) -> BlockRevision | None:
    try:
        row = conn.execute(
            f"SELECT {_COLUMNS} FROM memory_blocks INDEXED BY idx_memory_blocks_head"
            " WHERE session_id = ? AND label = ? AND head = 1",
            (_scope(session_id), label),
        ).fetchone()
    except sqlite3.OperationalError as exc:
        if _missing_table(exc):
            return None
        raise
    return None if row is None else _revision(row)


def block_history(
    conn: sqlite3.Connection,
    label: str,
    session_id: str | None,
    *,
    before_revision: int | None,
    limit: int,
) -> list[BlockRevision]:
    """Revisions of one block, newest first, below ``before_revision`` when given."""
    try:
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM memory_blocks WHERE session_id = ? AND label = ?"
            " AND revision < ? ORDER BY revision DESC LIMIT ?",
            (_scope(session_id), label, before_revision or 2**62, limit),
        ).fetchall()
    except sqlite3.OperationalError as exc:
        if _missing_table(exc):
            return []
        raise
    return [_revision(r) for r in rows]


def all_revisions(conn: sqlite3.Connection, session_id: str | None) -> Iterator[BlockRevision]:
    """Every revision of one scope, by label then revision (export, backup, mirror)."""
    try:
        cursor = conn.execute(
            f"SELECT {_COLUMNS} FROM memory_blocks WHERE session_id = ? ORDER BY label, revision",
            (_scope(session_id),),
        )
    except sqlite3.OperationalError as exc:
        if _missing_table(exc):
            return
        raise
    for row in cursor:
        yield _revision(row)


class BlockWrite(msgspec.Struct, frozen=True, kw_only=True):
    """One revision to write, as the caller gives it (the value counted already).
    ``description`` ``None`` keeps the block's; ``expected_revision`` ``None`` checks
    nothing, 0 means the block must not exist yet."""

    label: str
    session_id: str | None
    value: str
    tokens: int
    description: str | None
    max_tokens: int
    author: Author
    reason: str | None = None
    tool_call_id: str | None = None
    expected_revision: int | None = None


def write_revision(
    conn: sqlite3.Connection, write: BlockWrite, current: BlockRevision | None
) -> BlockRevision:
    """Insert the next revision of a block, in the caller's transaction.

    ``current`` is the block's latest revision as the caller read it in this transaction
    (``current_block``); ``expected_revision`` (0: the block must not exist) refuses a
    stale write with ``ConflictError``. A session block needs its session.
    """
    scope = _scope(write.session_id)
    have = 0 if current is None else current.revision
    if write.expected_revision is not None and write.expected_revision != have:
        raise ConflictError(
            f"expected_revision: block {write.label!r} is at revision {have}, "
            f"not {write.expected_revision}",
            data={"field": "expected_revision", "revision": have},
        )
    session_seq = 0
    if write.session_id is not None:
        row = conn.execute(
            "SELECT last_seq FROM sessions WHERE id = ?", (write.session_id,)
        ).fetchone()
        if row is None:
            raise NotFoundError.session(write.session_id)
        session_seq = int(row[0])
    if current is None:
        count = conn.execute(
            "SELECT COUNT(*) FROM memory_blocks INDEXED BY idx_memory_blocks_head"
            " WHERE session_id = ? AND head = 1",
            (scope,),
        ).fetchone()[0]
        if count >= MAX_BLOCKS_PER_SCOPE:
            raise InvalidParamsError(
                f"label: this scope already has {MAX_BLOCKS_PER_SCOPE} blocks, the most it "
                "may hold; delete one first",
                data={"field": "label"},
            )
    others = conn.execute(_OTHER_TOKENS, (scope, write.label)).fetchone()[0]
    if others + write.tokens > MAX_SCOPE_TOKENS:
        raise InvalidParamsError(
            f"value: {write.tokens} tokens, and the scope's other blocks hold {others}: "
            f"past the {MAX_SCOPE_TOKENS} tokens the blocks of one scope may hold together",
            data={"field": "value", "tokens": write.tokens, "scope_tokens": others},
        )
    rev = BlockRevision(
        label=write.label,
        session_id=write.session_id,
        revision=have + 1,
        value=write.value,
        description=write.description
        if write.description is not None
        else ("" if current is None else current.description),
        max_tokens=write.max_tokens,
        tokens=write.tokens,
        author=write.author,
        reason=write.reason,
        tool_call_id=write.tool_call_id,
        session_seq=session_seq,
        created_at=int(time.time() * 1000),
    )
    insert_revisions(conn, [rev])
    return rev


def insert_revisions(conn: sqlite3.Connection, revisions: list[BlockRevision]) -> None:
    """Insert revisions as they are (imports carry their history); the latest of each
    block becomes its head (the one before it, if stored, stops being one)."""
    latest: dict[tuple[str, str], int] = {}
    for r in revisions:
        key = (_scope(r.session_id), r.label)
        latest[key] = max(latest.get(key, 0), r.revision)
    conn.executemany(
        "UPDATE memory_blocks SET head = 0 WHERE session_id = ? AND label = ? AND head = 1",
        list(latest),
    )
    conn.executemany(
        f"INSERT INTO memory_blocks ({_COLUMNS}, head)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                _scope(r.session_id),
                r.label,
                r.revision,
                r.value,
                r.description,
                r.max_tokens,
                r.tokens,
                r.author,
                r.reason,
                r.tool_call_id,
                r.session_seq,
                r.created_at,
                int(latest[(_scope(r.session_id), r.label)] == r.revision),
            )
            for r in revisions
        ],
    )


def delete_block(conn: sqlite3.Connection, label: str, session_id: str | None) -> int:
    """Erase every revision of a block; the number of rows removed."""
    return conn.execute(
        "DELETE FROM memory_blocks WHERE session_id = ? AND label = ?",
        (_scope(session_id), label),
    ).rowcount
