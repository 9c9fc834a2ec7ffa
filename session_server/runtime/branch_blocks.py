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

from ..mirror_io.block_files import write_blocks_file
from ..storage.block_sql import all_revisions
from ..storage.file_modes import make_dir
from ..storage.store import AgentStore
from ..values.blocks import BlockRevision
from .memory_blocks import MemoryBlocks

__all__ = ["blocks_branched"]


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
