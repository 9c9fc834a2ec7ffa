"""Reading ``working_context_snapshot.json`` (file I/O; the pure part is ``mirror.snapshot``)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ..mirror.snapshot import SNAPSHOT_FILE, RestoredSnapshot, restore_snapshot, snapshot_problem
from .jsonl import read_json

__all__ = ["load_snapshot_cache", "read_snapshot"]

logger = logging.getLogger(__name__)


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


def load_snapshot_cache(session_dir: Path, *, last_seq: int) -> RestoredSnapshot | None:
    """The session's cached context when valid and taken at ``last_seq``; else ``None``.

    ``None`` means "rebuild from SQLite": the file is missing, corrupt, invalid, has no
    ``last_seq`` or was taken at another seq. Never raises on file content.
    """
    payload = read_snapshot(session_dir / SNAPSHOT_FILE)
    if payload is None:
        return None
    if payload.get("last_seq") != last_seq:
        return None
    return restore_snapshot(payload)
