"""Statements that turn a file of the current schema into one of version 3 (the
``sessions`` table rebuilt without the branch columns, the ``rewinds`` table dropped), for
migration tests. The caller sets ``PRAGMA user_version``."""

from __future__ import annotations

from typing import Final

__all__ = ["UNDO_V4"]

_V3_COLUMNS: Final = (
    "id, agent_id, created_at, updated_at, metadata, last_seq, last_turn,"
    " last_turn_start_seq, strategy, compaction_required, mirror_seq, mirror_state,"
    " mirror_files, snapshot_seq, snapshot_digest"
)

UNDO_V4: Final[tuple[str, ...]] = (
    "DROP TABLE rewinds",
    "CREATE TABLE sessions_v3 (id TEXT PRIMARY KEY NOT NULL, agent_id TEXT NOT NULL,"
    " created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, metadata TEXT,"
    " last_seq INTEGER NOT NULL DEFAULT 0, last_turn INTEGER NOT NULL DEFAULT 0,"
    " last_turn_start_seq INTEGER NOT NULL DEFAULT 0, strategy TEXT,"
    " compaction_required INTEGER NOT NULL DEFAULT 0, mirror_seq INTEGER NOT NULL DEFAULT 0,"
    " mirror_state TEXT, mirror_files TEXT, snapshot_seq INTEGER NOT NULL DEFAULT 0,"
    " snapshot_digest TEXT)",
    f"INSERT INTO sessions_v3 SELECT {_V3_COLUMNS} FROM sessions",
    "DROP TABLE sessions",
    "ALTER TABLE sessions_v3 RENAME TO sessions",
)
"""Version 4 (branches) undone."""
