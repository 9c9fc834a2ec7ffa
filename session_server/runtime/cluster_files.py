"""Agent files as cluster snapshots (I/O, run on worker threads): a consistent image of
a file, its applied log sequence, and an image put in place of a file."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from ..storage.file_modes import make_dir
from ..storage.turn_log import applied_seq

__all__ = ["file_image", "install_image", "local_applied_seq"]


def file_image(path: Path) -> tuple[bytes, int]:
    """The committed state of the agent file as one SQLite image (a read transaction
    through the backup API, beside a writer), and the log sequence it has applied."""
    source = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    target = sqlite3.connect(":memory:")
    try:
        source.backup(target)
        return target.serialize(), applied_seq(target)
    finally:
        target.close()
        source.close()


def local_applied_seq(path: Path) -> int:
    """The applied sequence of the agent file at ``path`` (0 when there is none)."""
    if not path.exists():
        return 0
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return applied_seq(conn)
    except sqlite3.Error:
        return 0
    finally:
        conn.close()


def install_image(path: Path, image: bytes) -> None:
    """Put ``image`` in place of the agent file (closed): written beside it, flushed,
    renamed over it; its old WAL and shared-memory files removed first."""
    make_dir(path.parent)
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            path.with_name(path.name + suffix).unlink()
    staged = path.with_name(path.name + ".restore")
    with staged.open("wb") as out:
        out.write(image)
        out.flush()
        os.fsync(out.fileno())
    os.replace(staged, path)
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
