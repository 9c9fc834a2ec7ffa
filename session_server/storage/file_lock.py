"""Exclusive advisory locks on files (flock), shared by every lock the project takes.

The kernel drops a flock when its holder dies, SIGKILL included, so a crashed process
never leaves a lock behind.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from .file_modes import file_mode

__all__ = ["try_exclusive_lock"]


def try_exclusive_lock(path: Path, *, create: bool = True) -> int | None:
    """Take ``path``'s exclusive lock without waiting: the open descriptor that holds it
    (the caller closes it to release), or ``None`` when another process holds it.

    ``create=False`` opens an existing file only (``FileNotFoundError`` otherwise).
    """
    flags = os.O_RDWR | (os.O_CREAT if create else 0)
    fd = os.open(path, flags, file_mode())
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd
