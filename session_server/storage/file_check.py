"""Check that an agent file is one this server could have written (synchronous I/O).

``check_agent_file`` runs on a staged copy (``storage.staging``) before a restore puts it
in place, so nothing it refuses ever replaces an agent's file. In order:

1. SQLite's ``integrity_check`` (every page, every index entry against its table);
2. ``PRAGMA user_version`` is a version this server knows (1..``SCHEMA_VERSION``);
3. the catalog holds only tables and indexes of this server's schema, of any version
   (no trigger, view, virtual table or other object: a trigger could delete events or
   inject context on every write, a view could stand in for a table);
4. an older file is brought forward by the migrations (``sqlite_open.migrate``);
5. the schema compared object by object with ``schema.sql`` (``values.file_shape``):
   tables, columns, indexes; an index a very old file lacks is built;
6. the invariants the store assumes (``invariant_problems``): every column of the type
   the store reads, ids non-empty, every event's session exists, seqs positive and at
   most their session's ``last_seq`` (no seq reused after a restore), turns at most
   ``last_turn``, JSON columns JSON objects, actions known, timestamps in range, and
   every compaction record one the builder can apply, whose bounds lie within its
   session (``values.records.record_bound_problem``), every persisted strategy valid;
7. every session's mirror marked stale (the JSONL files are rewritten from the file on
   activation; the snapshot of the replaced file is not trusted).

Every refusal is an ``InvalidParamsError`` (-32602) naming what is wrong.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import msgspec

from ..compaction.config import validate_strategy
from ..core.strategies import AGENT_STRATEGY_KEY
from ..values.codec import hydrate_event
from ..values.errors import CorruptRecordError, InvalidParamsError, SessionServerError
from ..values.events import ACTIONS
from ..values.file_shape import (
    ColumnShape,
    IndexShape,
    SchemaShape,
    TableShape,
    index_shape,
    missing_indexes,
    shape_problems,
    sql_words,
)
from ..values.records import record_bound_problem
from ..values.validation import MAX_TIMESTAMP_MS
from .recall_sql import is_recall_object, rebuild_objects
from .schema import SCHEMA_VERSION, schema_sql
from .sqlite_open import _statements, migrate

__all__ = ["check_agent_file", "file_shape", "invariant_problems", "reference_shape"]

# Objects of older schema versions that the migrations remove.
_OLD_INDEXES: Final = frozenset({"idx_events_session_created"})
_OLD_TABLES: Final = frozenset({"turn_usage", "usage_totals"})  # versions 7-11
# Tables a migration adds: the schema version that first has each (an older file lacks it
# until its migration makes it; the shape comparison after the migrations requires it).
_ADDED_TABLES: Final = {
    "streams": 4,
    "stream_segments": 4,
    "memory_blocks": 5,
    "rewinds": 6,
    "usage_days": 7,
    "session_days": 12,
    "recall_pending": 8,
    "events_fts_shards": 9,
    "events_fts_gone": 9,
    "lineage": 10,
}
_SHOWN: Final = 3  # problems named in a refusal (the rest are counted)


def _refuse(problems: list[str], field: str) -> InvalidParamsError:
    shown = "; ".join(problems[:_SHOWN])
    more = f" (and {len(problems) - _SHOWN} more)" if len(problems) > _SHOWN else ""
    return InvalidParamsError(
        f"{field}: not an agent file this server could have written: {shown}{more}",
        data={"field": field, "problems": problems[:20]},
    )


def file_shape(conn: sqlite3.Connection) -> SchemaShape:
    """The schema of the open database ``conn`` as values."""
    tables: dict[str, TableShape] = {}
    indexes: dict[str, IndexShape] = {}
    others: list[tuple[str, str]] = []
    listed = {
        str(r[1]): (bool(r[4]), bool(r[5]))
        for r in conn.execute("PRAGMA main.table_list")
        if r[2] == "table"
    }
    rows = conn.execute("SELECT type, name, tbl_name, sql FROM main.sqlite_master").fetchall()
    for kind, name, table, sql in rows:
        if kind == "table" and name in listed and not name.startswith("sqlite_"):
            columns = tuple(
                ColumnShape(str(c[1]), str(c[2]), bool(c[3]), c[4], int(c[5]), int(c[6]))
                for c in conn.execute("SELECT * FROM pragma_table_xinfo(?)", (name,))
            )
            without_rowid, strict = listed[name]
            tables[name] = TableShape(name, columns, without_rowid, strict, sql_words(sql or ""))
        elif kind == "index":
            flags = {
                str(r[1]): (bool(r[2]), bool(r[4]))
                for r in conn.execute("SELECT * FROM pragma_index_list(?)", (table,))
            }
            unique, partial = flags.get(name, (False, False))
            keys = [
                (None if k[2] is None else str(k[2]), bool(k[3]), k[4], bool(k[5]))
                for k in conn.execute("SELECT * FROM pragma_index_xinfo(?)", (name,))
            ]
            indexes[name] = index_shape(name, str(table), unique, partial, keys, sql)
        else:
            others.append((str(kind), str(name)))
    return SchemaShape(tables, indexes, tuple(sorted(others)))


@functools.cache
def reference_shape() -> SchemaShape:
    """The shape of a database made from ``schema.sql`` (built once, in memory)."""
    conn = sqlite3.connect(":memory:", isolation_level=None)
    try:
        for statement in _statements(schema_sql()):
            conn.execute(statement)
        return file_shape(conn)
    finally:
        conn.close()


def _known_objects(conn: sqlite3.Connection, version: int) -> list[str]:
    """Before any migration runs: only tables and indexes that some version of this
    server's schema has (a migration must not run over a trigger, view or stranger)."""
    expected = reference_shape()
    known_tables = expected.tables.keys()
    known_indexes = expected.indexes.keys() | _OLD_INDEXES
    out = []
    for kind, name in conn.execute("SELECT type, name FROM main.sqlite_master"):
        if (
            (kind == "table" and (name in known_tables or name in _OLD_TABLES))
            or (kind == "index" and name in known_indexes)
            or is_recall_object(kind, name)  # replaced whatever they are: rebuild_objects
        ):
            continue
        out.append(f"{kind} {name!r} is not part of this server's schema")
    for name in sorted(known_tables):
        if version < _ADDED_TABLES.get(name, 0):
            continue  # the migration adds it
        if not conn.execute(
            "SELECT 1 FROM main.sqlite_master WHERE type = 'table' AND name = ?", (name,)
        ).fetchone():
            out.append(f"table {name!r} is missing")
    return out


def _first(
    conn: sqlite3.Connection, sql: str, params: tuple[object, ...] = ()
) -> tuple[object, ...] | None:
    row = conn.execute(sql, params).fetchone()
    return None if row is None else tuple(row)


def _type_problems(conn: sqlite3.Connection) -> Iterator[str]:
    """Every column holds the storage class the store reads (SQLite stores any value in
    any column: a text ``seq`` would read back as a string). One scan per table."""
    for table in reference_shape().tables.values():
        wanted: list[tuple[str, tuple[str, ...]]] = []
        for column in table.columns:
            kind = "integer" if column.type.upper() == "INTEGER" else "text"
            wanted.append((column.name, (kind,) if column.notnull else (kind, "null")))
        found = ", ".join(f'typeof("{name}")' for name, _ in wanted)
        bad = " OR ".join(
            f'typeof("{name}") NOT IN ({", ".join(repr(k) for k in kinds)})'
            for name, kinds in wanted
        )
        row = _first(conn, f'SELECT {found} FROM "{table.name}" WHERE {bad} LIMIT 1')
        if row is None:
            continue
        for (col_name, kinds), held in zip(wanted, row, strict=True):
            if held not in kinds:
                yield f"{table.name}.{col_name}: holds a value of type {held}, not {kinds[0]}"
                break


def _json_object(column: str) -> str:
    return f"({column} IS NULL OR CASE WHEN json_valid({column}) THEN json_type({column}) = 'object' ELSE 0 END)"


_ACTIONS_SQL: Final = ", ".join(f"'{a}'" for a in ACTIONS)

# One scan of the events (with their session): each condition and what it means, in
# the order a refusal names them.
_EVENT_RULES: Final[tuple[tuple[str, str], ...]] = (
    (
        "s.id IS NULL AND NOT EXISTS (SELECT 1 FROM lineage l WHERE l.owner = e.session_id"
        " AND e.seq BETWEEN l.lo AND l.hi)",
        "events of session {sid!r}, which does not exist (and no fork reads them)",
    ),
    ("e.id = ''", "session {sid!r}: the event at seq {seq} has an empty id"),
    (
        "e.seq < 1 OR e.seq > s.last_seq",
        "session {sid!r}: event seq {seq} is outside 1..last_seq ({last_seq}); a later write"
        " would reuse a seq",
    ),
    (
        "e.turn < 0 OR e.turn > s.last_turn",
        "session {sid!r}: event seq {seq} has turn {turn}, outside 0..last_turn ({last_turn})",
    ),
    (
        "e.turn_start_seq < 0 OR e.turn_start_seq > e.seq OR e.token_count < 0",
        "session {sid!r}: event seq {seq} has a turn_start_seq or token_count out of range",
    ),
    (
        f"e.created_at NOT BETWEEN 0 AND {MAX_TIMESTAMP_MS}",
        "session {sid!r}: event seq {seq} has a created_at that is not a time in range",
    ),
    (f"e.action NOT IN ({_ACTIONS_SQL})", "session {sid!r}: event seq {seq} has an unknown action"),
    (
        f"NOT {_json_object('e.metadata')}",
        "session {sid!r}: the metadata of event seq {seq} is not a JSON object",
    ),
)

_SESSION_CHECKS: Final[tuple[tuple[str, str], ...]] = (
    ("SELECT id FROM sessions WHERE id = '' LIMIT 1", "a session has an empty id"),
    (
        "SELECT id, last_seq FROM sessions WHERE last_seq < 0 OR last_turn < 0"
        " OR last_turn_start_seq < 0 OR last_turn_start_seq > last_seq LIMIT 1",
        "session {0!r}: last_seq, last_turn or last_turn_start_seq is out of range",
    ),
    (
        f"SELECT id FROM sessions WHERE created_at NOT BETWEEN 0 AND {MAX_TIMESTAMP_MS}"
        f" OR updated_at NOT BETWEEN 0 AND {MAX_TIMESTAMP_MS} LIMIT 1",
        "session {0!r}: created_at or updated_at is not a time in range",
    ),
    (
        f"SELECT id FROM sessions WHERE NOT {_json_object('metadata')}"
        f" OR NOT {_json_object('strategy')} LIMIT 1",
        "session {0!r}: metadata or strategy is not a JSON object",
    ),
    (
        "SELECT session_id, seq FROM events GROUP BY session_id, seq HAVING count(*) > 1 LIMIT 1",
        "session {0!r}: seq {1} is used twice",
    ),
    (
        "SELECT t.session_id FROM tool_calls t LEFT JOIN sessions s ON s.id = t.session_id"
        " WHERE s.id IS NULL OR t.turn < 0 OR t.turn > s.last_turn OR t.turn_start_seq < 0"
        " OR t.turn_start_seq > s.last_seq LIMIT 1",
        "tool_calls: a row of session {0!r} names no session or a turn out of range",
    ),
    (
        "SELECT l.session_id FROM lineage l LEFT JOIN sessions s ON s.id = l.session_id"
        " WHERE s.id IS NULL OR l.lo < 0 OR l.hi < l.lo OR l.lo > s.last_seq + 1 LIMIT 1",
        "lineage: a segment of session {0!r} names no session or an empty range",
    ),
    (
        "SELECT i.session_id FROM idempotency i LEFT JOIN sessions s ON s.id = i.session_id"
        " WHERE s.id IS NULL OR NOT json_valid(i.result) LIMIT 1",
        "idempotency: a row of session {0!r} names no session or holds no JSON result",
    ),
)


def _event_problem(conn: sqlite3.Connection) -> str | None:
    flags = ", ".join(f"({cond})" for cond, _ in _EVENT_RULES)
    where = " OR ".join(f"({cond})" for cond, _ in _EVENT_RULES)
    row = _first(
        conn,
        f"SELECT e.session_id, e.seq, e.turn, s.last_seq, s.last_turn, {flags}"
        f" FROM events e LEFT JOIN sessions s ON s.id = e.session_id WHERE {where} LIMIT 1",
    )
    if row is None:
        return None
    sid, seq, turn, last_seq, last_turn = row[:5]
    for (_, problem), hit in zip(_EVENT_RULES, row[5:], strict=True):
        if hit:
            return problem.format(
                sid=sid, seq=seq, turn=turn, last_seq=last_seq, last_turn=last_turn
            )
    return None


def invariant_problems(conn: sqlite3.Connection) -> list[str]:
    """The invariants the store assumes that the file breaks (see the module doc); empty
    when it keeps them all. The schema must already be this server's."""
    out = list(_type_problems(conn))
    if out:
        return out  # the checks below compare values of the right types
    for sql, problem in _SESSION_CHECKS:
        row = _first(conn, sql)
        if row is not None:
            out.append(problem.format(*row))
    event = _event_problem(conn)
    if event is not None:
        out.append(event)
    if not out:
        out.extend(_record_problems(conn))
        out.extend(_strategy_problems(conn))
        out.extend(_block_problems(conn))
    return out


# Memory blocks: one current revision per block, the latest; a session block's session
# exists; every revision's fields are ones this server writes.
_BLOCK_CHECKS: Final = (
    (
        "SELECT session_id, label FROM memory_blocks GROUP BY session_id, label"
        " HAVING SUM(head = 1) != 1 OR MAX(CASE WHEN head = 1 THEN revision END) != MAX(revision)"
        " LIMIT 1",
        "memory block {1!r} of scope {0!r}: not exactly one current revision, the latest",
    ),
    (
        "SELECT b.session_id, b.label FROM memory_blocks AS b WHERE b.session_id != ''"
        " AND NOT EXISTS (SELECT 1 FROM sessions AS s WHERE s.id = b.session_id) LIMIT 1",
        "memory block {1!r}: its session {0!r} does not exist",
    ),
    (
        "SELECT session_id, label FROM memory_blocks WHERE author NOT IN"
        " ('client', 'model', 'operator') OR revision < 1 OR max_tokens < 1 OR tokens < 0"
        " OR head NOT IN (0, 1) LIMIT 1",
        "memory block {1!r} of scope {0!r}: a revision this server could not have written",
    ),
)


def _block_problems(conn: sqlite3.Connection) -> Iterator[str]:
    for sql, problem in _BLOCK_CHECKS:
        row = _first(conn, sql)
        if row is not None:
            yield problem.format(*row)


def _strategy_problems(conn: sqlite3.Connection) -> Iterator[str]:
    """Every persisted strategy (a session's, the agent default) is one this server
    accepts: a build would otherwise refuse every call of that session or agent."""
    rows = conn.execute(
        "SELECT 'session ' || quote(id), strategy FROM sessions WHERE strategy IS NOT NULL"
        " UNION ALL SELECT 'the agent default', value FROM agent_settings WHERE key = ?",
        (AGENT_STRATEGY_KEY,),
    )
    for owner, text in rows:
        try:
            validate_strategy(msgspec.json.decode(text), source="strategy")
        except (InvalidParamsError, msgspec.DecodeError) as exc:
            message = exc.message if isinstance(exc, InvalidParamsError) else str(exc)
            yield f"{owner}: its strategy is not one this server accepts ({message})"


def _record_problems(conn: sqlite3.Connection) -> Iterator[str]:
    """Every compaction record decodes, and its bounds lie within its session."""
    rows = conn.execute(
        "SELECT id, session_id, seq, action, content, metadata, created_at FROM events"
        " WHERE action = 'compaction'"
    )
    for event_id, session_id, seq, action, content, metadata, created_at in rows:
        where = f"session {session_id!r}: compaction seq {seq}"
        try:
            event = hydrate_event(
                {
                    "id": event_id,
                    "session_id": session_id,
                    "seq": seq,
                    "action": action,
                    "content": content,
                    "metadata": metadata,
                    "created_at": created_at,
                }
            )
        except CorruptRecordError as exc:
            yield f"{where}: {exc.message}"
            continue
        if event.compaction is None:
            yield f"{where}: holds no compaction record"
            continue
        problem = record_bound_problem(event.compaction, int(seq))
        if problem:
            yield f"{where}: {problem}"


def _schema_problems(conn: sqlite3.Connection) -> list[str]:
    return shape_problems(file_shape(conn), reference_shape(), may_miss_indexes=True)


def check_agent_file(path: Path, *, field: str = "data") -> int:
    """Check the staged file ``path`` (see the module doc) and prepare it to be put in
    place; returns its number of sessions. ``InvalidParamsError`` naming ``field`` (what
    the caller gave: ``data`` for an RPC restore, the backup file for the CLI) when it is
    not a file this server could have written. The file is modified (migrated, mirrors
    marked stale): call it on a copy only."""
    try:
        conn = sqlite3.connect(path, isolation_level=None)
    except sqlite3.Error as exc:
        raise _refuse([f"not a usable SQLite file ({exc})"], field) from None
    try:
        try:
            return _check(conn, field)
        except SessionServerError:
            raise
        except (sqlite3.Error, msgspec.MsgspecError, ValueError, OverflowError) as exc:
            raise _refuse([f"SQLite cannot use it ({exc})"], field) from None
    finally:
        conn.close()


def _check(conn: sqlite3.Connection, field: str) -> int:
    conn.execute("PRAGMA trusted_schema=OFF")  # nothing in the file's schema runs
    conn.execute("PRAGMA journal_mode=DELETE")  # a single self-contained file
    problems = [str(r[0]) for r in conn.execute("PRAGMA integrity_check(20)")]
    if problems != ["ok"]:
        raise _refuse([f"SQLite's integrity_check: {p}" for p in problems], field)
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if not 1 <= version <= SCHEMA_VERSION:
        raise _refuse(
            [
                f"schema version (PRAGMA user_version) {version} is not one this server "
                f"knows (1 to {SCHEMA_VERSION})"
            ],
            field,
        )
    problems = _known_objects(conn, version)
    if problems:
        raise _refuse(problems, field)
    if version < SCHEMA_VERSION:
        try:
            migrate(conn)
        except sqlite3.Error as exc:
            raise _refuse(
                [f"the migration from schema version {version} failed ({exc})"], field
            ) from None
    try:
        rebuild_objects(conn, [s for s in _statements(schema_sql()) if "events_fts" in s])
    except sqlite3.Error as exc:
        raise _refuse([f"its recall index cannot be replaced ({exc})"], field) from None
    problems = _schema_problems(conn)
    if problems:
        raise _refuse(problems, field)
    problems = invariant_problems(conn)
    if problems:
        raise _refuse(problems, field)
    expected = reference_shape()
    lacking = missing_indexes(file_shape(conn), expected.indexes)
    if lacking:
        conn.execute("BEGIN IMMEDIATE")
        for statement in _statements(schema_sql()):
            if any(f" {name} " in f" {statement} " for name in lacking):
                conn.execute(statement)
        conn.execute("COMMIT")
        problems = shape_problems(file_shape(conn), expected)
        if problems:
            raise _refuse(problems, field)
    # Every mirror stale and no snapshot trusted: activation rewrites the files.
    conn.execute(
        "UPDATE sessions SET mirror_seq = -1, mirror_state = NULL, mirror_files = NULL,"
        " snapshot_seq = 0, snapshot_digest = NULL"
    )
    return int(conn.execute("SELECT count(*) FROM sessions").fetchone()[0])
