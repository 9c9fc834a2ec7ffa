"""The mirror columns of the ``sessions`` table: their values and the SQL that reads and
writes them (synchronous bodies; ``AgentStore`` runs them on its connections).

Each session row holds its mirror cursor (``mirror_seq``; ``-1``: marked stale by a
delete), the checkpoint of the last clean close (``mirror_state``), the file stamps
(``mirror_files``) and the snapshot binding (``snapshot_seq``, ``snapshot_digest``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Final

import msgspec

__all__ = [
    "MirrorCheckpoint",
    "MirrorRow",
    "MirrorStatus",
    "read_mirror_row",
    "read_mirror_statuses",
    "save_checkpoints",
]


class MirrorRow(msgspec.Struct, frozen=True):
    """What SQLite holds about a session's mirror: the cursor (``-1``: marked stale by a
    delete), the checkpoint of the last clean close and its file stamps (JSON text), and
    the SHA-256 of the snapshot file SQLite vouches for (``None``: none; a delete clears
    it in its own transaction)."""

    session_id: str
    last_seq: int
    mirror_seq: int
    mirror_state: str | None
    mirror_files: str | None
    snapshot_digest: str | None = None


class MirrorStatus(msgspec.Struct, frozen=True):
    """A session's mirror columns as activation checks them (the checkpoint not read)."""

    session_id: str
    last_seq: int
    mirror_seq: int
    has_checkpoint: bool
    mirror_files: str | None


class MirrorCheckpoint(msgspec.Struct, frozen=True):
    """Stored at a clean close: the mirror cursor, the writer's checkpoint, the file
    stamps and the snapshot binding (seq, SHA-256) when a snapshot was written."""

    session_id: str
    mirror_seq: int
    state: str
    files: str
    snapshot: tuple[int, str] | None = None


_MIRROR_COLUMNS: Final = "id, last_seq, mirror_seq, mirror_state, mirror_files, snapshot_digest"


def _mirror_row(row: sqlite3.Row) -> MirrorRow:
    return MirrorRow(str(row[0]), int(row[1]), int(row[2]), row[3], row[4], row[5])


def read_mirror_statuses(conn: sqlite3.Connection) -> list[MirrorStatus]:
    """Every session's mirror status."""
    rows = conn.execute(
        "SELECT id, last_seq, mirror_seq, mirror_state IS NOT NULL, mirror_files FROM sessions"
    )
    return [MirrorStatus(str(r[0]), int(r[1]), int(r[2]), bool(r[3]), r[4]) for r in rows]


def read_mirror_row(conn: sqlite3.Connection, session_id: str) -> MirrorRow | None:
    """One session's mirror columns; ``None`` when it does not exist."""
    row = conn.execute(
        f"SELECT {_MIRROR_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
    ).fetchone()
    return None if row is None else _mirror_row(row)


def save_checkpoints(conn: sqlite3.Connection, checkpoints: Sequence[MirrorCheckpoint]) -> None:
    """Store the checkpoints of a clean close (the body of one write transaction)."""
    for cp in checkpoints:
        conn.execute(
            "UPDATE sessions SET mirror_seq = ?, mirror_state = ?, mirror_files = ? WHERE id = ?",
            (cp.mirror_seq, cp.state, cp.files, cp.session_id),
        )
        if cp.snapshot is not None:
            conn.execute(
                "UPDATE sessions SET snapshot_seq = ?, snapshot_digest = ? WHERE id = ?",
                (cp.snapshot[0], cp.snapshot[1], cp.session_id),
            )
