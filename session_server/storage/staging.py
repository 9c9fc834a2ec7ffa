"""Staging folders inside the memory dir, and their removal at start-up (synchronous I/O).

Restores, imports and RPC backups and exports write copies of agent data before they
are checked, put in place or sent: in ``<memory_dir>/.staging/<kind>-<random>/``, on the
file system of the agent files (a checked restore is then put in place by one atomic
rename) and where an operator looks. A process removes its folder when it is done (and the root, when it is the last);
a SIGKILL leaves it behind, and ``sweep_staging`` (run by the server as it starts)
removes what no live process is using.

Each folder holds ``.lock``, locked (flock) by its owner while it uses the folder: the
sweep removes a folder only while it holds that lock itself, so a CLI restore beside a
starting server keeps its folder. The owner checks after locking that its lock file is
still the folder's (a sweep may have removed the folder between its creation and the
lock), and otherwise starts again with a new folder.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from .file_lock import try_exclusive_lock
from .file_modes import make_dir

__all__ = ["STAGING_DIR", "staging", "sweep_staging"]

log = logging.getLogger(__name__)

STAGING_DIR: Final = ".staging"
_LOCK: Final = ".lock"


def _still_ours(fd: int, lock: Path) -> bool:
    try:
        return os.stat(lock).st_ino == os.fstat(fd).st_ino
    except FileNotFoundError:
        return False


@contextlib.contextmanager
def staging(memory_dir: Path, kind: str) -> Iterator[Path]:
    """A new, locked staging folder under ``memory_dir`` (removed on exit)."""
    root = memory_dir / STAGING_DIR
    while True:
        make_dir(root)
        try:
            folder = Path(tempfile.mkdtemp(prefix=f"{kind}-", dir=root))
        except FileNotFoundError:  # another process removed the empty root meanwhile
            continue
        lock = folder / _LOCK
        try:
            fd = try_exclusive_lock(lock)
        except FileNotFoundError:  # swept before the lock file was made
            continue
        if fd is not None and _still_ours(fd, lock):
            break
        if fd is not None:
            os.close(fd)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        os.close(fd)
        with contextlib.suppress(OSError):  # the last one out removes the empty root
            root.rmdir()


def sweep_staging(memory_dir: Path) -> int:
    """Remove the staging folders (and stray files) no live process holds; returns how
    many were removed."""
    root = memory_dir / STAGING_DIR
    try:
        entries = list(root.iterdir())
    except FileNotFoundError:
        return 0
    removed = 0
    for entry in entries:
        if not entry.is_dir() or entry.is_symlink():
            entry.unlink(missing_ok=True)
            removed += 1
            continue
        try:
            fd = try_exclusive_lock(entry / _LOCK)
        except FileNotFoundError:  # removed meanwhile
            continue
        if fd is None:
            continue  # a live process is using it
        try:
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
        finally:
            os.close(fd)
    if removed:
        log.info("removed %d staging folder(s) left by a process that died", removed)
    return removed
