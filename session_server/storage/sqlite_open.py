"""Open an agent file and bring its schema up to date (I/O, on a worker thread).

``connect`` opens the file in WAL mode with the configured durability (a reader opens it
read-only); ``migrate`` brings a new file to the whole schema and an older file through
``MIGRATIONS``, one version at a time, in one transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from ..values.errors import AgentUnavailableError
from .file_modes import create_file
from .schema import SCHEMA_VERSION, schema_sql

__all__ = [
    "MIGRATIONS",
    "WAL_AUTOCHECKPOINT_PAGES",
    "connect",
    "migrate",
    "wal_autocheckpoint_pages",
]

# SQLite checkpoints the WAL inside the commit that takes it past this many pages (its
# default is 1000); measured here on fresh files and on 2,000-turn runs (docs/decisions.md):
# - NORMAL: a commit does not sync; a checkpoint syncs twice, about 4 ms however many
#   frames it folds. At 1000 pages a 4-event turn (about 10 pages) paid one every ~100
#   turns: the whole p99 and part of the mean. 4000 pages (a WAL of up to 16 MiB per
#   open agent, reused in place, removed when the agent closes) make it one every ~400.
# - FULL: every commit syncs the WAL, and a commit that grows the file syncs its size
#   too (a file-system journal commit); a longer WAL means more commits growing it after
#   each open, which cost more than the checkpoints saved (mean turn 487 -> 516 us).
WAL_AUTOCHECKPOINT_PAGES: Final = {"NORMAL": 4000, "FULL": 1000}


def wal_autocheckpoint_pages(synchronous: str) -> int:
    """The WAL size (pages) at which a writer at ``synchronous`` checkpoints (any level
    that syncs its commits: FULL's)."""
    return WAL_AUTOCHECKPOINT_PAGES.get(synchronous.upper(), WAL_AUTOCHECKPOINT_PAGES["FULL"])


def connect(
    path: Path, *, synchronous: str, busy_timeout_ms: int, readonly: bool
) -> sqlite3.Connection:
    """Open ``path`` in WAL mode with the given durability; fails on a non-SQLite file."""
    # check_same_thread=False: the store hands the connection to pool threads, one call at
    # a time (its locks guarantee that), never concurrently.
    # A reader opens the file read-only (``mode=ro``): it never creates a missing file,
    # and takes no lock a writer in another process would wait for (WAL readers share).
    target = f"{Path(path).resolve().as_uri()}?mode=ro" if readonly else str(path)
    if not readonly:
        create_file(Path(path))  # SQLite gives its -wal and -shm files the file's mode
    conn = sqlite3.connect(target, isolation_level=None, check_same_thread=False, uri=readonly)
    try:
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
        conn.execute("PRAGMA journal_mode=WAL")  # any read fails here on a non-SQLite file
        conn.execute(f"PRAGMA synchronous={synchronous}")
        if readonly:
            conn.execute("PRAGMA query_only=1")
        else:
            # Deleted rows are overwritten with zeros, not just unlinked (DESIGN erasure):
            # with a checkpoint after each delete, no deleted text survives in the files.
            conn.execute("PRAGMA secure_delete=ON")
            conn.execute(f"PRAGMA wal_autocheckpoint={wal_autocheckpoint_pages(synchronous)}")
    except BaseException:
        conn.close()
        raise
    return conn


def _statements(script: str) -> list[str]:
    """Split a DDL script into statements (``executescript`` would commit implicitly)."""
    out: list[str] = []
    buf = ""
    for line in script.splitlines(keepends=True):
        if not buf and line.strip().startswith("--"):
            continue
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    return [s for s in out if s]


# MIGRATIONS[n] upgrades a file at user_version n to n + 1. Version 0 means "empty file":
# it gets the whole current schema at once, so this only grows for later versions.
MIGRATIONS: dict[int, Sequence[str]] = {
    # 1 -> 2: the mirror checkpoint and the snapshot binding. A migrated file has neither:
    # its snapshot is not trusted and its mirror is verified (streamed) once on activation.
    1: (
        "ALTER TABLE sessions ADD COLUMN mirror_state TEXT",
        "ALTER TABLE sessions ADD COLUMN mirror_files TEXT",
        "ALTER TABLE sessions ADD COLUMN snapshot_seq INTEGER NOT NULL DEFAULT 0",
        "ALTER TABLE sessions ADD COLUMN snapshot_digest TEXT",
    ),
    # 2 -> 3: the (session_id, created_at) index goes. It served only ``since`` reads,
    # which now scan the session's events by seq; every append paid for it (about 1.8 of
    # the 12 WAL pages of a 4-event turn).
    2: ("DROP INDEX IF EXISTS idx_events_session_created",),
    # 3 -> 4: live turns (docs/live-turns.md): the stream of a session and its chunks.
    3: (
        "CREATE TABLE IF NOT EXISTS streams (session_id TEXT PRIMARY KEY NOT NULL,"
        " stream_id TEXT, generation INTEGER NOT NULL DEFAULT 0,"
        " last_cursor INTEGER NOT NULL DEFAULT 0, first_cursor INTEGER NOT NULL DEFAULT 0,"
        " base_seq INTEGER, updated_at INTEGER NOT NULL) WITHOUT ROWID",
        "CREATE TABLE IF NOT EXISTS stream_segments (session_id TEXT NOT NULL,"
        " first_cursor INTEGER NOT NULL, last_cursor INTEGER NOT NULL,"
        " chunks INTEGER NOT NULL, data TEXT NOT NULL,"
        " PRIMARY KEY (session_id, first_cursor)) WITHOUT ROWID",
    ),
    # 4 -> 5: memory blocks (every revision; see ``storage/block_sql``).
    4: (
        "CREATE TABLE IF NOT EXISTS memory_blocks ("
        " session_id TEXT NOT NULL, label TEXT NOT NULL, revision INTEGER NOT NULL,"
        " value TEXT NOT NULL, description TEXT NOT NULL DEFAULT '',"
        " max_tokens INTEGER NOT NULL, tokens INTEGER NOT NULL, author TEXT NOT NULL,"
        " reason TEXT, tool_call_id TEXT, session_seq INTEGER NOT NULL DEFAULT 0,"
        " created_at INTEGER NOT NULL, head INTEGER NOT NULL DEFAULT 0,"
        " PRIMARY KEY (session_id, label, revision)) WITHOUT ROWID",
        "CREATE INDEX IF NOT EXISTS idx_memory_blocks_head ON memory_blocks(session_id, label)"
        " WHERE head = 1",
    ),
    # 5 -> 6: branches (issue 36): a session's parent and fork point, and the rewinds.
    5: (
        "ALTER TABLE sessions ADD COLUMN parent_session_id TEXT",
        "ALTER TABLE sessions ADD COLUMN fork_seq INTEGER",
        "ALTER TABLE sessions ADD COLUMN fork_kind TEXT",
        "CREATE INDEX IF NOT EXISTS idx_sessions_parent ON sessions(parent_session_id)"
        " WHERE parent_session_id IS NOT NULL",
        "CREATE TABLE IF NOT EXISTS rewinds (session_id TEXT NOT NULL, seq INTEGER NOT NULL,"
        " to_seq INTEGER NOT NULL, abandoned_from INTEGER NOT NULL,"
        " abandoned_to INTEGER NOT NULL, branch_session_id TEXT,"
        " erased INTEGER NOT NULL DEFAULT 0, reason TEXT, created_at INTEGER NOT NULL,"
        " PRIMARY KEY (session_id, seq)) WITHOUT ROWID",
    ),
    # 6 -> 7: usage per turn with running totals, budgets and retention policies.
    6: (
        "ALTER TABLE sessions ADD COLUMN budget TEXT",
        "ALTER TABLE sessions ADD COLUMN retention TEXT",
        "CREATE TABLE IF NOT EXISTS turn_usage (session_id TEXT NOT NULL,"
        " seq INTEGER NOT NULL, turn INTEGER NOT NULL, created_at INTEGER NOT NULL,"
        " model TEXT, input_tokens INTEGER NOT NULL, output_tokens INTEGER NOT NULL,"
        " cached_input_tokens INTEGER NOT NULL, cache_write_tokens INTEGER NOT NULL,"
        " reasoning_tokens INTEGER NOT NULL, PRIMARY KEY (session_id, seq)) WITHOUT ROWID",
        "CREATE TABLE IF NOT EXISTS usage_totals (session_id TEXT NOT NULL,"
        " model TEXT NOT NULL, input_tokens INTEGER NOT NULL,"
        " output_tokens INTEGER NOT NULL, cached_input_tokens INTEGER NOT NULL,"
        " cache_write_tokens INTEGER NOT NULL, reasoning_tokens INTEGER NOT NULL,"
        " turns INTEGER NOT NULL, PRIMARY KEY (session_id, model)) WITHOUT ROWID",
        "CREATE TABLE IF NOT EXISTS usage_days (day INTEGER NOT NULL,"
        " model TEXT NOT NULL, input_tokens INTEGER NOT NULL,"
        " output_tokens INTEGER NOT NULL, cached_input_tokens INTEGER NOT NULL,"
        " cache_write_tokens INTEGER NOT NULL, reasoning_tokens INTEGER NOT NULL,"
        " turns INTEGER NOT NULL, PRIMARY KEY (day, model)) WITHOUT ROWID",
    ),
    # 7 -> 8: the recall index (``events_fts`` and its triggers), empty; the events
    # already stored are indexed afterwards in bounded steps (``runtime.recall``), from
    # the range recorded here.
    7: (
        *(s for s in _statements(schema_sql()) if "events_fts" in s or "recall_pending" in s),
        "INSERT OR REPLACE INTO agent_settings(key, value)"
        " SELECT 'recall_backfill', json_object('next', 0, 'end', max(rowid)) FROM events"
        " HAVING count(*) > 0",
    ),
    # 8 -> 9: the recall index in shards of bounded size (``storage.recall_shards``), so a
    # delete rewrites the shards of what it deleted, not the whole index. The single
    # index goes (its pages zeroed: ``secure_delete``) and the stored events are indexed
    # again in bounded steps in the background, as after the 7 -> 8 migration.
    8: (
        "DROP TRIGGER IF EXISTS events_fts_insert",
        "DROP TRIGGER IF EXISTS events_fts_delete",
        "DROP TRIGGER IF EXISTS events_fts_update",
        "DROP TABLE IF EXISTS events_fts",
        *(s for s in _statements(schema_sql()) if "events_fts" in s),
        "DELETE FROM recall_pending",
        "DELETE FROM agent_settings WHERE key = 'recall_purge'",
        "INSERT OR REPLACE INTO agent_settings(key, value)"
        " SELECT 'recall_backfill', json_object('next', 0, 'end', max(rowid)) FROM events"
        " HAVING count(*) > 0",
    ),
    # 9 -> 10: lineage (zero-copy forks and rewinds), empty: forks made before it hold
    # copies of their rows and read them as any session without lineage does.
    9: tuple(s for s in _statements(schema_sql()) if "EXISTS lineage " in s or "ON lineage(" in s),
    # 10 -> 11: session.list's order as an index (a cursor page reads its own rows only).
    10: tuple(s for s in _statements(schema_sql()) if "idx_sessions_updated" in s),
    # 11 -> 12: usage kept in the rows a turn writes anyway (``values.usage_state``): each
    # turn's record on its last event, the running totals and the open UTC day in the
    # session row, closed days in ``session_days`` (``usage_days`` made from them); the
    # tables of one row per turn and per session and model go.
    11: (
        "ALTER TABLE events ADD COLUMN usage TEXT",
        "ALTER TABLE sessions ADD COLUMN usage TEXT",
        "CREATE TABLE IF NOT EXISTS session_days (session_id TEXT NOT NULL,"
        " day INTEGER NOT NULL, model TEXT NOT NULL, input_tokens INTEGER NOT NULL,"
        " output_tokens INTEGER NOT NULL, cached_input_tokens INTEGER NOT NULL,"
        " cache_write_tokens INTEGER NOT NULL, reasoning_tokens INTEGER NOT NULL,"
        " turns INTEGER NOT NULL, PRIMARY KEY (session_id, day, model)) WITHOUT ROWID",
        "UPDATE events SET usage = json_array(u.input_tokens, u.output_tokens,"
        " u.cached_input_tokens, u.cache_write_tokens, u.reasoning_tokens, u.model)"
        " FROM turn_usage AS u"
        " WHERE events.session_id = u.session_id AND events.seq = u.seq",
        "CREATE TEMP TABLE usage_open AS SELECT t.session_id AS session_id,"
        " t.created_at / 86400000 AS day FROM turn_usage AS t"
        " WHERE t.seq = (SELECT max(seq) FROM turn_usage WHERE session_id = t.session_id)",
        "INSERT INTO session_days SELECT u.session_id, u.created_at / 86400000,"
        " COALESCE(u.model, ''), SUM(u.input_tokens), SUM(u.output_tokens),"
        " SUM(u.cached_input_tokens), SUM(u.cache_write_tokens), SUM(u.reasoning_tokens),"
        " COUNT(*) FROM turn_usage AS u JOIN usage_open AS o ON o.session_id = u.session_id"
        " WHERE u.created_at / 86400000 != o.day GROUP BY 1, 2, 3",
        "UPDATE sessions SET usage = json_object("
        "'t', json((SELECT json_group_object(model, json_array(input_tokens, output_tokens,"
        " cached_input_tokens, cache_write_tokens, reasoning_tokens, turns))"
        " FROM usage_totals WHERE session_id = sessions.id)),"
        " 'd', o.day,"
        " 'p', json((SELECT json_group_object(m, json_array(a, b, c, d, e, n)) FROM ("
        "SELECT COALESCE(model, '') AS m, SUM(input_tokens) AS a, SUM(output_tokens) AS b,"
        " SUM(cached_input_tokens) AS c, SUM(cache_write_tokens) AS d,"
        " SUM(reasoning_tokens) AS e, COUNT(*) AS n FROM turn_usage"
        " WHERE session_id = sessions.id AND created_at / 86400000 = o.day GROUP BY 1))))"
        " FROM usage_open AS o WHERE o.session_id = sessions.id",
        "DELETE FROM usage_days",
        "INSERT INTO usage_days SELECT day, model, SUM(input_tokens), SUM(output_tokens),"
        " SUM(cached_input_tokens), SUM(cache_write_tokens), SUM(reasoning_tokens),"
        " SUM(turns) FROM session_days GROUP BY day, model",
        "DROP TABLE usage_open",
        "DROP TABLE turn_usage",
        "DROP TABLE usage_totals",
    ),
}


def migrate(conn: sqlite3.Connection) -> None:
    """Bring the database to ``SCHEMA_VERSION`` (new file: ``schema.sql``), atomically."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise AgentUnavailableError(
            f"database schema version {version} is newer than this program ({SCHEMA_VERSION})"
        )
    if version == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        if version == 0:
            for statement in _statements(schema_sql()):
                conn.execute(statement)
            version = SCHEMA_VERSION
        while version < SCHEMA_VERSION:
            for statement in MIGRATIONS[version]:
                conn.execute(statement)
            version += 1
        conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
