"""Modes of the files and folders the server writes (I/O shell).

Memories are private: by default every file is created ``0600`` and every folder ``0700``
(the memory dir, agent folders, ``agent.sqlite`` and its ``-wal``/``-shm``, which SQLite
creates with the database's own mode, lock files, mirror JSONL files, snapshots, exports,
backups), whatever the process umask. ``set_file_mode`` chooses another file mode (the
folder mode follows: ``x`` wherever ``r`` is given), e.g. ``0o640`` for a backup group;
``session-server --file-mode`` sets it for the process and also narrows the umask to it,
so files made by libraries (temporary files, SQLite's journals) follow as well.

The modes are process settings, read at each creation; the umask can only remove bits
from them.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import BinaryIO, Final

__all__ = [
    "DEFAULT_FILE_MODE",
    "create_file",
    "dir_mode",
    "file_mode",
    "make_dir",
    "open_append",
    "parse_file_mode",
    "set_file_mode",
]

DEFAULT_FILE_MODE: Final = 0o600

_file_mode = DEFAULT_FILE_MODE


def parse_file_mode(value: str | int) -> int:
    """An octal mode (``"600"``, ``"0640"``, ``0o600``); ``ValueError`` unless the owner
    may read and write and no execute, setuid, setgid or sticky bit is asked for."""
    mode = int(value, 8) if isinstance(value, str) else value
    if mode & ~0o666 or mode & 0o600 != 0o600:
        raise ValueError(
            f"file mode: {oct(mode)} must give the owner read and write (0o600) and no "
            "execute or special bits (at most 0o666)"
        )
    return mode


def set_file_mode(mode: int) -> None:
    """Create files with ``mode`` from now on (folders with the matching ``dir_mode``)."""
    global _file_mode
    _file_mode = parse_file_mode(mode)


def file_mode() -> int:
    return _file_mode


def dir_mode() -> int:
    """The folder mode matching ``file_mode``: search (x) wherever read is given."""
    return _file_mode | ((_file_mode & 0o444) >> 2)


def make_dir(path: Path) -> None:
    """Create ``path`` and its missing parents with ``dir_mode`` (existing ones are left
    as they are)."""
    missing = []
    folder = path
    while not folder.exists() and folder.parent != folder:
        missing.append(folder)
        folder = folder.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # made meanwhile by another thread
            folder.mkdir(mode=dir_mode())


def create_file(path: Path) -> None:
    """Make sure ``path`` exists; a new one gets ``file_mode`` (before SQLite opens it, so
    its journals get that mode too)."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, file_mode()))


def open_append(path: Path) -> BinaryIO:
    """``path`` opened for appending (created with ``file_mode`` when missing)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, file_mode())
    return os.fdopen(fd, "ab")
