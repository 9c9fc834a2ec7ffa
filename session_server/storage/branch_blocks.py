"""Session memory blocks in a fork's or a rewind's transaction (I/O: run inside
``branch_sql``'s bodies, on the store's thread).

The decisions are pure (``values.block_branches``); this reads a session's revisions and
its rewinds, and writes what they decide in the caller's transaction, so blocks and
events fork and rewind together, also after a SIGKILL at any moment.
"""

from __future__ import annotations

import sqlite3

from ..values.block_branches import fork_copies, rewind_blocks
from ..values.codec import now_ms
from .block_sql import all_revisions, insert_revisions

__all__ = ["abandoned_ranges", "copy_blocks", "rewind_session_blocks"]


def abandoned_ranges(conn: sqlite3.Connection, session_id: str) -> list[tuple[int, int]]:
    """The ``(to_seq, rewind_seq)`` of each rewind of ``session_id``: the seqs between
    (both excluded) are no longer the session's."""
    return [
        (int(r[0]), int(r[1]))
        for r in conn.execute(
            "SELECT to_seq, seq FROM rewinds WHERE session_id = ? ORDER BY seq", (session_id,)
        )
    ]


def copy_blocks(conn: sqlite3.Connection, source_id: str, new_id: str, at_seq: int) -> int:
    """Give ``new_id`` the session blocks of ``source_id`` as they stood at ``at_seq``,
    with their history up to then; the number of revisions copied."""
    copies = fork_copies(
        all_revisions(conn, source_id), at_seq, abandoned_ranges(conn, source_id), new_id
    )
    if copies:
        insert_revisions(conn, copies)
    return len(copies)


def rewind_session_blocks(
    conn: sqlite3.Connection, session_id: str, to_seq: int, rewind_seq: int, *, erase: bool
) -> bool:
    """Bring ``session_id``'s blocks back to their state at ``to_seq`` (before the
    rewind's own row is written); true when a block changed. ``erase``: the revisions
    written after ``to_seq`` are deleted first (``secure_delete`` zeroes them; the caller
    erases the WAL)."""
    changed = False
    if erase:
        changed = (
            conn.execute(
                "DELETE FROM memory_blocks WHERE session_id = ? AND session_seq > ?",
                (session_id, to_seq),
            ).rowcount
            > 0
        )
        if changed:  # each block's latest remaining revision is its head again
            conn.execute(
                "UPDATE memory_blocks SET head = 1 WHERE session_id = ?1 AND head = 0"
                " AND revision = (SELECT MAX(m.revision) FROM memory_blocks AS m"
                " WHERE m.session_id = ?1 AND m.label = memory_blocks.label)",
                (session_id,),
            )
    plan = rewind_blocks(
        all_revisions(conn, session_id),
        to_seq,
        abandoned_ranges(conn, session_id),
        rewind_seq=rewind_seq,
        now_ms=now_ms(),
    )
    if plan.drop:
        conn.executemany(
            "DELETE FROM memory_blocks WHERE session_id = ? AND label = ?",
            [(session_id, label) for label in plan.drop],
        )
    if plan.restore:
        insert_revisions(conn, list(plan.restore))
    return changed or bool(plan.drop) or bool(plan.restore)
