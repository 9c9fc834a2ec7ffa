"""Reading ``working_context_snapshot.json`` (file I/O; the pure part is ``mirror.snapshot``).

The snapshot is a cache bound to its content: SQLite records the SHA-256 of the bytes the
server wrote (``sessions.snapshot_digest``), and a file whose bytes do not have that digest
is never served, whatever its ``last_seq`` says (edited by hand, left by a crash, older
than a delete). Each rejection is logged and counted (``REJECTED_SNAPSHOTS``).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from pathlib import Path
from typing import Any, Final

import msgspec

from ..mirror.snapshot import SNAPSHOT_FILE, RestoredSnapshot, restore_snapshot, snapshot_problem
from .jsonl import read_bytes_or_none, read_json

__all__ = [
    "REJECTED_SNAPSHOTS",
    "RejectedSnapshots",
    "drop_unbound_snapshot",
    "load_snapshot_cache",
    "read_snapshot",
    "snapshot_digest",
]

logger = logging.getLogger(__name__)
_DECODER: Final = msgspec.json.Decoder()


class RejectedSnapshots:
    """How many snapshot files were not served because their bytes did not match the
    digest SQLite recorded (each one is logged); the context was rebuilt from events."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def note(self, path: Path, why: str) -> None:
        with self._lock:  # snapshots are read on worker threads
            self.count += 1
        logger.warning("%s: snapshot not served (%s); rebuilding from SQLite", path, why)


REJECTED_SNAPSHOTS: Final = RejectedSnapshots()


def snapshot_digest(data: bytes) -> str:
    """The digest SQLite keeps for a snapshot file: SHA-256 of its bytes, in hex."""
    return hashlib.sha256(data).hexdigest()


def drop_unbound_snapshot(session_dir: Path, digest: str | None) -> bool:
    """Remove the session's snapshot file unless its bytes have ``digest`` (the SHA-256
    SQLite vouches for; ``None``: it vouches for none); whether a file was removed.

    A snapshot SQLite does not vouch for may hold messages deleted since it was written:
    a delete unbinds the snapshot in its own transaction, and the process can die before
    the file is removed. Readers that take the file as it is (the memory view) must then
    never see it: activation removes it before anything reads the session's files.
    """
    path = session_dir / SNAPSHOT_FILE
    if digest is not None:
        data = read_bytes_or_none(path)
        if data is not None and snapshot_digest(data) == digest:
            return False
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def read_snapshot(path: Path) -> dict[str, Any] | None:
    """The snapshot at ``path`` when it exists and is valid; else ``None`` (a warning is logged)."""
    payload = read_json(path)
    if payload is None:
        return None
    problem = snapshot_problem(payload)
    if problem is not None:
        logger.warning("%s: invalid snapshot ignored (%s)", path, problem)
        return None
    return payload


def load_snapshot_cache(
    session_dir: Path, *, last_seq: int, digest: str
) -> RestoredSnapshot | None:
    """The session's cached context when its bytes have ``digest`` (the one SQLite
    recorded), it is valid and taken at ``last_seq``; else ``None``.

    ``None`` means "rebuild from SQLite": the file is missing, unreadable, its digest does
    not match, or it is invalid or was taken at another seq. Never raises on file content.
    """
    path = session_dir / SNAPSHOT_FILE
    data = read_bytes_or_none(path)
    if data is None:
        return None
    if snapshot_digest(data) != digest:
        REJECTED_SNAPSHOTS.note(path, "its bytes do not match the digest SQLite recorded")
        return None
    try:
        payload = _DECODER.decode(data)
    except msgspec.DecodeError:
        REJECTED_SNAPSHOTS.note(path, "malformed JSON")
        return None
    problem = snapshot_problem(payload)
    if problem is not None:
        REJECTED_SNAPSHOTS.note(path, problem)
        return None
    if payload.get("last_seq") != last_seq:
        return None
    return restore_snapshot(payload)
