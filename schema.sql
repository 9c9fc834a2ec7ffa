-- session-server schema, version 9 (PRAGMA user_version). The store executes this file
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
  snapshot_digest TEXT,                     -- SHA-256 of that snapshot file; NULL: none trusted
  parent_session_id TEXT,                   -- the session this one was forked from, or NULL
  fork_seq INTEGER,                         -- the parent's seq it was forked at, or NULL
  fork_kind TEXT,                           -- 'fork' or 'rewind' (a rewind's branch), or NULL
  budget TEXT,                              -- usage budget (JSON) or NULL
  retention TEXT,                           -- retention policy (JSON) or NULL
  usage TEXT                                -- usage totals and the open day (JSON) or NULL
);

-- the order of session.list (most recently updated first): a page is read in order from
-- its cursor, not sorted from every matching session (plain columns: no function of the
-- schema runs when a backup is checked with trusted_schema off)
CREATE INDEX IF NOT EXISTS idx_sessions_updated ON sessions(updated_at DESC, created_at DESC, id);

-- a session's forks and rewind branches (``session.branches``)
CREATE INDEX IF NOT EXISTS idx_sessions_parent ON sessions(parent_session_id)
  WHERE parent_session_id IS NOT NULL;

-- zero-copy forks and rewinds (docs/branches.md): a session with rows here reads, in seq
-- order, the rows of ``owner`` with lo <= seq <= hi of each of its segments (disjoint,
-- increasing); a session without rows here reads its own rows. Rows of ``events`` no
-- session reads any more are erased.
CREATE TABLE IF NOT EXISTS lineage (
  session_id TEXT NOT NULL,                 -- the reading session
  lo INTEGER NOT NULL,                      -- first seq of the segment
  hi INTEGER NOT NULL,                      -- last seq of the segment (2^62 - 1: open)
  owner TEXT NOT NULL,                      -- events.session_id of the rows read
  PRIMARY KEY (session_id, lo)
) WITHOUT ROWID;
-- who reads an owner's rows (deletes, retention, erasure)
CREATE INDEX IF NOT EXISTS idx_lineage_owner ON lineage(owner, lo);

-- one row per rewind: the seq it took (never reused) and what it abandoned
CREATE TABLE IF NOT EXISTS rewinds (
  session_id TEXT NOT NULL,
  seq INTEGER NOT NULL,                     -- the rewind's own seq (the session's new last_seq)
  to_seq INTEGER NOT NULL,                  -- the session continues from here
  abandoned_from INTEGER NOT NULL,          -- first abandoned seq
  abandoned_to INTEGER NOT NULL,            -- last abandoned seq (the old head)
  branch_session_id TEXT,                   -- the branch holding the abandoned tail, or NULL
  erased INTEGER NOT NULL DEFAULT 0,
  reason TEXT,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;

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
  -- token_count: tokens of the event's message, counted on write; usage: on the last event
  -- of a turn persisted with usage, that usage (JSON), else NULL
  token_count INTEGER NOT NULL DEFAULT 0,
  usage TEXT
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

-- live turns (docs/live-turns.md): per session, the stream in progress (stream_id NULL
-- when none), its generation and the last chunk cursor the session ever gave (never
-- reused); the row outlives its streams, their chunks do not
CREATE TABLE IF NOT EXISTS streams (
  session_id TEXT PRIMARY KEY NOT NULL,
  stream_id TEXT,                           -- the open stream, or NULL
  generation INTEGER NOT NULL DEFAULT 0,    -- the producer allowed to write (fencing)
  last_cursor INTEGER NOT NULL DEFAULT 0,   -- cursor of the last chunk stored
  first_cursor INTEGER NOT NULL DEFAULT 0,  -- cursor of the open stream's first chunk
  base_seq INTEGER,                         -- the turn's base seq (stream.open), or NULL
  updated_at INTEGER NOT NULL               -- ms since epoch of the last open or append
) WITHOUT ROWID;

-- chunks of open streams, several per row (one JSON chunk per line); deleted, with
-- secure_delete, in the transaction that ends the stream
CREATE TABLE IF NOT EXISTS stream_segments (
  session_id TEXT NOT NULL,
  first_cursor INTEGER NOT NULL,
  last_cursor INTEGER NOT NULL,
  chunks INTEGER NOT NULL,
  data TEXT NOT NULL,                       -- the chunks, one JSON object per line
  PRIMARY KEY (session_id, first_cursor)
) WITHOUT ROWID;
-- memory blocks: every revision of every block (the current value is the latest);
-- session_id '' is the agent's scope. A delete erases every revision of the block.
CREATE TABLE IF NOT EXISTS memory_blocks (
  session_id TEXT NOT NULL,                 -- '' for an agent block, else its session
  label TEXT NOT NULL,
  revision INTEGER NOT NULL,                -- 1, 2, 3 ... per block
  value TEXT NOT NULL,
  description TEXT NOT NULL DEFAULT '',
  max_tokens INTEGER NOT NULL,
  tokens INTEGER NOT NULL,                  -- tokens of value (the real tokenizer)
  author TEXT NOT NULL,                     -- client, model or operator
  reason TEXT,
  tool_call_id TEXT,                        -- the model's tool call that wrote it
  session_seq INTEGER NOT NULL DEFAULT 0,   -- the session's last_seq when written
  created_at INTEGER NOT NULL,              -- ms since epoch
  head INTEGER NOT NULL DEFAULT 0,          -- 1: the block's latest revision (its value)
  PRIMARY KEY (session_id, label, revision)
) WITHOUT ROWID;
-- the current revision of each block, found without scanning the history
CREATE INDEX IF NOT EXISTS idx_memory_blocks_head ON memory_blocks(session_id, label)
  WHERE head = 1;

-- usage per session, UTC day (days since 1970-01-01) and model ('' when the turn named
-- none), for the days closed: a session's open day is in its row (sessions.usage)
CREATE TABLE IF NOT EXISTS session_days (
  session_id TEXT NOT NULL,
  day INTEGER NOT NULL,
  model TEXT NOT NULL,
  input_tokens INTEGER NOT NULL,
  output_tokens INTEGER NOT NULL,
  cached_input_tokens INTEGER NOT NULL,
  cache_write_tokens INTEGER NOT NULL,
  reasoning_tokens INTEGER NOT NULL,
  turns INTEGER NOT NULL,
  PRIMARY KEY (session_id, day, model)
) WITHOUT ROWID;

-- session_days summed over the agent's sessions (per UTC day and model)
CREATE TABLE IF NOT EXISTS usage_days (
  day INTEGER NOT NULL,
  model TEXT NOT NULL,
  input_tokens INTEGER NOT NULL,
  output_tokens INTEGER NOT NULL,
  cached_input_tokens INTEGER NOT NULL,
  cache_write_tokens INTEGER NOT NULL,
  reasoning_tokens INTEGER NOT NULL,
  turns INTEGER NOT NULL,
  PRIMARY KEY (day, model)
) WITHOUT ROWID;

-- Recall: the full-text index of what events say (docs/recall.md), split into shards of
-- bounded size: FTS5 tables ``events_fts_<n>`` created on demand (``storage.recall_shards``;
-- their tokenizer: ``recall_shards.TOKENIZE``), each holding the events of a rowid range
-- (``values.recall_shards``), rowid the event's. The triggers queue each written event in
-- ``recall_pending`` and each deleted or rewritten one in ``events_fts_gone``, in the
-- transaction that writes or deletes it; the store works both queues before that
-- transaction commits (``recall_pending.index_pending``, in ``transactions.write_txn``):
-- a deleted event's shard is merged (or dropped) then, so no posting of its text stays.
-- So a plain SQLite client may write events too.
-- ``agent_settings['recall_backfill']`` is the part of a migrated file still to index.
CREATE TABLE IF NOT EXISTS events_fts_shards (
  shard INTEGER PRIMARY KEY NOT NULL,       -- its FTS5 table is events_fts_<shard>
  first_rowid INTEGER NOT NULL UNIQUE,      -- it holds events from this rowid to the next shard's
  last_rowid INTEGER NOT NULL,              -- the highest rowid it ever indexed
  chars INTEGER NOT NULL                    -- text indexed into it (bounded: SHARD_CHARS)
);

CREATE TABLE IF NOT EXISTS events_fts_gone (
  event_rowid INTEGER PRIMARY KEY NOT NULL  -- an event deleted or rewritten, to erase
);

CREATE TABLE IF NOT EXISTS recall_pending (
  event_rowid INTEGER PRIMARY KEY NOT NULL  -- an event written, not indexed yet
);

CREATE TRIGGER IF NOT EXISTS events_fts_insert AFTER INSERT ON events BEGIN
  INSERT OR IGNORE INTO recall_pending(event_rowid) VALUES (new.rowid);
END;

CREATE TRIGGER IF NOT EXISTS events_fts_delete AFTER DELETE ON events BEGIN
  DELETE FROM recall_pending WHERE event_rowid = old.rowid;
  INSERT OR IGNORE INTO events_fts_gone(event_rowid) VALUES (old.rowid);
END;

CREATE TRIGGER IF NOT EXISTS events_fts_update AFTER UPDATE OF action, content, metadata
  ON events BEGIN
  INSERT OR IGNORE INTO events_fts_gone(event_rowid) VALUES (old.rowid);
  INSERT OR IGNORE INTO recall_pending(event_rowid) VALUES (new.rowid);
END;
