-- session-server schema, version 4 (PRAGMA user_version). The store executes this file
-- on a new database; older files are brought forward by the migrations in
-- session_server/storage/sqlite_ops.py (MIGRATIONS).

CREATE TABLE IF NOT EXISTS sessions (
  id TEXT PRIMARY KEY NOT NULL,
  agent_id TEXT NOT NULL,
  created_at INTEGER NOT NULL,              -- ms since epoch
  updated_at INTEGER NOT NULL,              -- ms since epoch, moves on every append
  metadata TEXT,                            -- JSON object or NULL
  last_seq INTEGER NOT NULL DEFAULT 0,      -- highest seq ever assigned: never reused
  last_turn INTEGER NOT NULL DEFAULT 0,     -- highest turn number ever assigned
  last_turn_start_seq INTEGER NOT NULL DEFAULT 0, -- seq of the user message opening last_turn
  strategy TEXT,                            -- persisted compaction strategy (JSON) or NULL
  compaction_required INTEGER NOT NULL DEFAULT 0,
  mirror_seq INTEGER NOT NULL DEFAULT 0,    -- JSONL mirror cursor: last seq written to files
                                            -- (-1: stale, set by a delete in its transaction)
  mirror_state TEXT,                        -- mirror checkpoint at the last clean close (JSON)
  mirror_files TEXT,                        -- mirror file sizes and mtimes at that close (JSON)
  snapshot_seq INTEGER NOT NULL DEFAULT 0,  -- seq the trusted context snapshot reflects
  snapshot_digest TEXT                      -- SHA-256 of that snapshot file; NULL: none trusted
);

CREATE TABLE IF NOT EXISTS events (
  id TEXT PRIMARY KEY NOT NULL,
  session_id TEXT NOT NULL,
  seq INTEGER NOT NULL,                     -- 1, 2, 3 ... per session
  action TEXT NOT NULL,
  content TEXT,
  metadata TEXT,                            -- compact JSON object or NULL
  created_at INTEGER NOT NULL,              -- ms since epoch
  turn INTEGER NOT NULL DEFAULT 0,          -- turn number within the session
  turn_start_seq INTEGER NOT NULL DEFAULT 0,-- seq of the user message that opened the turn
  token_count INTEGER NOT NULL DEFAULT 0    -- tokens of the event's message, counted on write
);

-- A session's events in order; also serves ``since`` reads (a scan of the session's
-- events: a created_at index cost every append about 1.8 of its 12 WAL pages).
CREATE UNIQUE INDEX IF NOT EXISTS idx_events_session_seq ON events(session_id, seq);
-- the latest compaction of a session, found without scanning its events (partial: tiny)
CREATE INDEX IF NOT EXISTS idx_events_compaction ON events(session_id, seq)
  WHERE action = 'compaction';

-- tool call id -> turn, so a late tool result joins the turn of its call
CREATE TABLE IF NOT EXISTS tool_calls (
  session_id TEXT NOT NULL,
  call_id TEXT NOT NULL,
  turn INTEGER NOT NULL,
  turn_start_seq INTEGER NOT NULL,
  PRIMARY KEY (session_id, call_id)
) WITHOUT ROWID;

-- results of writes made with an idempotency key, returned again on retry
CREATE TABLE IF NOT EXISTS idempotency (
  session_id TEXT NOT NULL,
  key TEXT NOT NULL,
  result TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (session_id, key)
) WITHOUT ROWID;

-- compaction counters and other agent-level settings
CREATE TABLE IF NOT EXISTS agent_settings (
  key TEXT PRIMARY KEY NOT NULL,
  value TEXT NOT NULL
) WITHOUT ROWID;

-- Recall: the full-text index of what events say (docs/recall.md). Its rowid is the
-- event's rowid. The triggers queue each written event in ``recall_pending`` and erase a
-- deleted one's index row, in the transaction that writes or deletes it; the store
-- indexes the queue before that transaction commits (``recall_sql.index_pending``, in
-- ``transactions.write_txn``), so a plain SQLite client may write events too.
-- ``agent_settings['recall_backfill']`` is the part of a migrated file still to index;
-- ``agent_settings['recall_purge']`` says a delete's postings are still to merge away.
CREATE VIRTUAL TABLE IF NOT EXISTS events_fts USING fts5(
  text, tokenize = "unicode61 remove_diacritics 2 categories 'L* N* Co So'"
);

CREATE TABLE IF NOT EXISTS recall_pending (
  event_rowid INTEGER PRIMARY KEY NOT NULL  -- an event written, not indexed yet
);

CREATE TRIGGER IF NOT EXISTS events_fts_insert AFTER INSERT ON events BEGIN
  INSERT OR IGNORE INTO recall_pending(event_rowid) VALUES (new.rowid);
END;

-- FTS5 deletes leave the old postings in place until segments merge: the flag asks the
-- delete's caller (and the next activation, after a crash) to merge them ('optimize').
CREATE TRIGGER IF NOT EXISTS events_fts_delete AFTER DELETE ON events BEGIN
  DELETE FROM events_fts WHERE rowid = old.rowid;
  DELETE FROM recall_pending WHERE event_rowid = old.rowid;
  INSERT OR REPLACE INTO agent_settings(key, value) VALUES ('recall_purge', '1');
END;

CREATE TRIGGER IF NOT EXISTS events_fts_update AFTER UPDATE OF action, content, metadata
  ON events BEGIN
  DELETE FROM events_fts WHERE rowid = old.rowid;
  INSERT OR IGNORE INTO recall_pending(event_rowid) VALUES (new.rowid);
  INSERT OR REPLACE INTO agent_settings(key, value) VALUES ('recall_purge', '1');
END;
