"""Statements that turn a file of the current schema into one of an older version (the
migrations' steps undone, newest first), for migration tests: ``undo_to(version)``. The
caller sets ``PRAGMA user_version`` (and undoes versions 1-3, which changed indexes and
the sessions table of the first files, itself)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from session_server.storage.schema import SCHEMA_VERSION, schema_sql
from session_server.storage.sqlite_open import _statements

__all__ = ["UNDO", "old_agent_file", "undo_to"]

_V3_COLUMNS: Final = (
    "id, agent_id, created_at, updated_at, metadata, last_seq, last_turn,"
    " last_turn_start_seq, strategy, compaction_required, mirror_seq, mirror_state,"
    " mirror_files, snapshot_seq, snapshot_digest"
)

# UNDO[n]: what version n added, removed again (a file of version n becomes one of n - 1).
UNDO: Final[dict[int, tuple[str, ...]]] = {
    # live turns
    4: ("DROP TABLE streams", "DROP TABLE stream_segments"),
    # memory blocks
    5: ("DROP TABLE memory_blocks",),
    # branches: the rewinds, and the sessions table without the branch columns (every
    # column a later version added to it goes too)
    6: (
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
    ),
    # usage, budgets and retention (the sessions table rebuilt without their columns:
    # SQLite's DROP COLUMN cannot rewrite a table whose last column has a comment)
    7: (
        "DROP TABLE turn_usage",
        "DROP TABLE usage_totals",
        "DROP TABLE usage_days",
        "CREATE TABLE sessions_v6 (id TEXT PRIMARY KEY NOT NULL, agent_id TEXT NOT NULL,"
        " created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, metadata TEXT,"
        " last_seq INTEGER NOT NULL DEFAULT 0, last_turn INTEGER NOT NULL DEFAULT 0,"
        " last_turn_start_seq INTEGER NOT NULL DEFAULT 0, strategy TEXT,"
        " compaction_required INTEGER NOT NULL DEFAULT 0, mirror_seq INTEGER NOT NULL DEFAULT 0,"
        " mirror_state TEXT, mirror_files TEXT, snapshot_seq INTEGER NOT NULL DEFAULT 0,"
        " snapshot_digest TEXT, parent_session_id TEXT, fork_seq INTEGER, fork_kind TEXT)",
        f"INSERT INTO sessions_v6 SELECT {_V3_COLUMNS}, parent_session_id, fork_seq, fork_kind"
        " FROM sessions",
        "DROP TABLE sessions",
        "ALTER TABLE sessions_v6 RENAME TO sessions",
        "CREATE INDEX idx_sessions_parent ON sessions(parent_session_id)"
        " WHERE parent_session_id IS NOT NULL",
    ),
    # the recall index
    8: (
        "DROP TRIGGER events_fts_insert",
        "DROP TRIGGER events_fts_delete",
        "DROP TRIGGER events_fts_update",
        "DROP TABLE events_fts",
        "DROP TABLE recall_pending",
        "DELETE FROM agent_settings WHERE key IN ('recall_backfill', 'recall_purge')",
    ),
    # the recall index in shards: the single index of version 8 and its triggers again
    # (the shards' tables stay, unregistered: version 9 drops a stale one when it makes
    # a shard of that name), every event to index again
    9: (
        "DROP TRIGGER events_fts_insert",
        "DROP TRIGGER events_fts_delete",
        "DROP TRIGGER events_fts_update",
        "DROP TABLE events_fts_shards",
        "DROP TABLE events_fts_gone",
        "CREATE VIRTUAL TABLE events_fts USING fts5(text,"
        " tokenize = \"unicode61 remove_diacritics 2 categories 'L* N* Co So'\")",
        "CREATE TRIGGER events_fts_insert AFTER INSERT ON events BEGIN"
        " INSERT OR IGNORE INTO recall_pending(event_rowid) VALUES (new.rowid); END",
        "CREATE TRIGGER events_fts_delete AFTER DELETE ON events BEGIN"
        " DELETE FROM events_fts WHERE rowid = old.rowid;"
        " DELETE FROM recall_pending WHERE event_rowid = old.rowid;"
        " INSERT OR REPLACE INTO agent_settings(key, value) VALUES ('recall_purge', '1'); END",
        "CREATE TRIGGER events_fts_update AFTER UPDATE OF action, content, metadata"
        " ON events BEGIN DELETE FROM events_fts WHERE rowid = old.rowid;"
        " INSERT OR IGNORE INTO recall_pending(event_rowid) VALUES (new.rowid);"
        " INSERT OR REPLACE INTO agent_settings(key, value) VALUES ('recall_purge', '1'); END",
        "INSERT OR REPLACE INTO agent_settings(key, value)"
        " SELECT 'recall_backfill', json_object('next', 0, 'end', max(rowid)) FROM events"
        " HAVING count(*) > 0",
    ),
    # lineage (zero-copy forks)
    10: ("DROP TABLE lineage",),
    # session.list's order as an index
    11: ("DROP INDEX idx_sessions_updated",),
    # usage in the turn's own rows: the tables of version 7 back (empty), the columns and
    # the closed days gone
    12: (
        "CREATE TABLE turn_usage (session_id TEXT NOT NULL, seq INTEGER NOT NULL,"
        " turn INTEGER NOT NULL, created_at INTEGER NOT NULL, model TEXT,"
        " input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,"
        " cached_input_tokens INTEGER NOT NULL, cache_write_tokens INTEGER NOT NULL,"
        " reasoning_tokens INTEGER NOT NULL, PRIMARY KEY (session_id, seq)) WITHOUT ROWID",
        "CREATE TABLE usage_totals (session_id TEXT NOT NULL, model TEXT NOT NULL,"
        " input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,"
        " cached_input_tokens INTEGER NOT NULL, cache_write_tokens INTEGER NOT NULL,"
        " reasoning_tokens INTEGER NOT NULL, turns INTEGER NOT NULL,"
        " PRIMARY KEY (session_id, model)) WITHOUT ROWID",
        "DROP TABLE session_days",
        "DELETE FROM usage_days",
        "ALTER TABLE events DROP COLUMN usage",
        "ALTER TABLE sessions DROP COLUMN usage",
    ),
}


def undo_to(version: int) -> list[str]:
    """The statements that turn a current file into one of ``version`` (at least 3)."""
    assert max(UNDO) == SCHEMA_VERSION, "a migration was added without its undo here"
    return [s for v in sorted(UNDO, reverse=True) if v > version for s in UNDO[v]]


def old_agent_file(db: Path, version: int, texts: Sequence[str]) -> sqlite3.Connection:
    """An agent file at ``db`` as ``version`` (at least 3) wrote it, with one session
    ``s`` of agent ``agent`` holding a user message per text (seqs and turns from 1).
    Returns its connection (autocommit, WAL) for what the caller adds; the caller closes
    it."""
    db.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    for statement in [*_statements(schema_sql()), *undo_to(version)]:
        conn.execute(statement)
    conn.execute(f"PRAGMA user_version={version}")
    conn.execute("BEGIN")
    conn.execute(
        "INSERT INTO sessions(id, agent_id, created_at, updated_at, last_seq, last_turn)"
        " VALUES ('s', 'agent', 1, 1, ?, ?)",
        (len(texts), len(texts)),
    )
    conn.executemany(
        "INSERT INTO events(id, session_id, seq, action, content, created_at, turn,"
        " turn_start_seq) VALUES (?, 's', ?, 'user_message', ?, 1, ?, ?)",
        [(f"e{i}", i, text, i, i) for i, text in enumerate(texts, start=1)],
    )
    conn.execute("COMMIT")
    return conn
