"""After a fork or a rewind committed: the session blocks it changed reach the core's
block cache and the mirror (I/O shell; the SQL ran in the branch's own transaction,
``storage.branch_blocks``).

Run under the actor's write lock, right after the commit: the cache forgets each
session's blocks (the next build reads them again), and each session's
``blocks.jsonl`` is rewritten whole from SQLite on the mirror's worker, after every
mirror write scheduled before it.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from ..mirror_io.block_files import read_blocks_file, write_blocks_file
from ..mirror_io.jsonl import atomic_write_bytes, encode_lines
from ..storage.block_sql import all_revisions
from ..storage.branch_sql import rewind_target
from ..storage.file_modes import make_dir
from ..storage.store import AgentStore
from ..values.blocks import BLOCKS_FILE, BlockRevision
from ..values.errors import SessionServerError
from .memory_blocks import MemoryBlocks

__all__ = ["blocks_branched", "drop_erased_lines"]


def _revisions(session_id: str, conn: sqlite3.Connection) -> list[BlockRevision]:
    return list(all_revisions(conn, session_id))


def _write_file(folder: Path, revisions: Sequence[BlockRevision]) -> None:
    if revisions:
        make_dir(folder)
    write_blocks_file(folder, revisions, fsync=True)


async def blocks_branched(
    blocks: MemoryBlocks, store: AgentStore, session_ids: Sequence[str]
) -> None:
    """The blocks of ``session_ids`` changed in a committed fork or rewind."""
    for sid in session_ids:
        blocks.cache.written(sid)
    if not blocks.mirror.enabled:
        return
    for sid in session_ids:
        revisions = await store.query(functools.partial(_revisions, sid))
        blocks.mirror.run_later(
            functools.partial(_write_file, blocks.mirror.session_dir(sid), revisions)
        )


def _drop_after(folder: Path, seq: int) -> None:
    """Rewrite ``folder/blocks.jsonl`` without the revisions written after ``seq``."""
    items = read_blocks_file(folder)
    kept = [
        item
        for item in items
        if not (isinstance(item, dict) and int(item.get("session_seq", 0)) > seq)
    ]
    if len(kept) == len(items):
        return
    if kept:
        atomic_write_bytes(folder / BLOCKS_FILE, encode_lines(kept), fsync=True)
    else:
        (folder / BLOCKS_FILE).unlink(missing_ok=True)


async def drop_erased_lines(
    blocks: MemoryBlocks, store: AgentStore, session_id: str, to_seq: int
) -> None:
    """Before a rewind with ``erase`` (under the write lock): the revisions it will erase
    leave the session's ``blocks.jsonl`` first, so that no file keeps them, also after a
    crash between. Errors of ``to_seq`` are left to the rewind's own transaction."""
    if not blocks.mirror.enabled or isinstance(to_seq, bool) or not isinstance(to_seq, int):
        return
    try:
        point = await store.query(functools.partial(_target, session_id, to_seq))
    except SessionServerError:
        return  # refused by the rewind itself, with nothing written
    blocks.mirror.run_later(
        functools.partial(_drop_after, blocks.mirror.session_dir(session_id), point)
    )
    await blocks.mirror.drain()


def _target(session_id: str, to_seq: int, conn: sqlite3.Connection) -> int:
    return rewind_target(conn, session_id, to_seq)
