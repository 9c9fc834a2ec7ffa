"""``blocks.jsonl``: memory block revisions as files (synchronous file I/O).

One JSON object per revision (``BlockRevision``'s fields), by label then revision. An
export folder holds the session's blocks this way; the live mirror holds one per agent
folder (agent blocks) and one per session folder. Readers of the reference layout
ignore the file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..storage.file_modes import make_dir
from ..values.blocks import BLOCKS_FILE, BlockRevision
from .jsonl import (
    append_bytes,
    atomic_write_bytes,
    encode_line,
    encode_lines,
    iter_jsonl_bytes,
    read_bytes_or_none,
)

__all__ = ["append_revision", "drop_label", "read_blocks_file", "write_blocks_file"]


def write_blocks_file(
    folder: Path, revisions: Sequence[BlockRevision], *, fsync: bool = False
) -> bool:
    """Write ``folder/blocks.jsonl`` (removed when there are no revisions); True when
    written."""
    path = folder / BLOCKS_FILE
    if not revisions:
        path.unlink(missing_ok=True)
        return False
    atomic_write_bytes(path, encode_lines(r.to_dict() for r in revisions), fsync=fsync)
    return True


def read_blocks_file(folder: Path) -> list[Any]:
    """The objects of ``folder/blocks.jsonl`` (empty when there is none)."""
    data = read_bytes_or_none(folder / BLOCKS_FILE)
    if data is None:
        return []
    return [item for _, item in iter_jsonl_bytes(data, BLOCKS_FILE)]


def append_revision(folder: Path, revision: BlockRevision) -> None:
    """Add one revision's line to ``folder/blocks.jsonl`` (the folder made if needed)."""
    make_dir(folder)
    append_bytes(folder / BLOCKS_FILE, encode_line(revision.to_dict()))


def drop_label(folder: Path, label: str) -> None:
    """Rewrite ``folder/blocks.jsonl`` without the lines of ``label`` (a deleted block);
    removed when nothing is left. Written whole to a new file and renamed (``secure``:
    no line of the block stays in a file the mirror keeps)."""
    items = read_blocks_file(folder)
    if not items:
        return
    kept = [item for item in items if item.get("label") != label]
    if len(kept) == len(items):
        return
    path = folder / BLOCKS_FILE
    if kept:
        atomic_write_bytes(path, encode_lines(kept), fsync=True)
    else:
        path.unlink(missing_ok=True)
