"""The read behind ``AgentStore.context_window``: a tool-pair-safe window of a session's
events with its state and latest compaction record, in one read snapshot (a synchronous
body run on the reader connection).

The widening is the one rule of ``values.turns`` (``widening_turns``, ``window_from``).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from ..values.errors import CorruptRecordError, NotFoundError
from ..values.events import SessionEvent
from ..values.plans import ContextWindow
from ..values.records import CompactionRecord
from ..values.turns import widening_turns, window_from
from .lineage_sql import read_lineage, select_ordered, source_for
from .sqlite_open import connect
from .stored_rows import (
    EVENT_COLUMNS,
    SKIPPED_RECORDS,
    hydrate_or_skip,
    read_session_state,
    rows_to_events,
)

__all__ = ["read_context_window", "read_context_window_at"]


def read_context_window(
    conn: sqlite3.Connection,
    session_id: str,
    limit: int | None,
    from_seq: int | None,
    from_record: bool,
) -> ContextWindow:
    """The window ``AgentStore.context_window`` answers (see there)."""
    conn.execute("BEGIN")  # one read snapshot for the session row and the events
    try:
        state = read_session_state(conn, session_id)
        if state is None:
            raise NotFoundError.session(session_id)
        lineage = read_lineage(conn, session_id)
        src, pre = source_for(session_id, lineage)  # ``events``, or the lineage's ranges
        crow = conn.execute(
            f"SELECT {EVENT_COLUMNS} FROM {src} WHERE session_id = ?"
            " AND action = 'compaction' ORDER BY seq DESC LIMIT 1",
            (*pre, session_id),
        ).fetchone()
        record_event = None if crow is None else hydrate_or_skip(crow)
        record: CompactionRecord | None = None
        if record_event is not None:
            try:
                record = CompactionRecord.of(record_event)
            except CorruptRecordError as exc:  # the history reads as if uncompacted
                SKIPPED_RECORDS.note(exc)
        if from_record:
            from_seq = None if record is None else record.from_seq
        if lineage is not None:  # one range per segment, newest first
            rows = select_ordered(
                conn, session_id, lineage, "seq >= ?", [from_seq or 0], desc=True,
                limit=None if limit is None else max(0, int(limit)),
            )  # fmt: skip
        else:
            where = "session_id = ?"
            args: list[Any] = [session_id]
            if from_seq is not None:
                where += " AND seq >= ?"
                args.append(from_seq)
            sql = f"SELECT {EVENT_COLUMNS} FROM events WHERE {where} ORDER BY seq DESC"
            if limit is not None:
                sql += " LIMIT ?"
                args.append(max(0, int(limit)))
            rows = conn.execute(sql, args).fetchall()
        rows.reverse()
        events = rows_to_events(rows)
        prefix: list[SessionEvent] = []
        if events and limit is not None and len(rows) >= limit:
            needed = widening_turns(events)
            if needed:
                # Each needed turn is the turn of an event in the window: its row has the
                # seq of the turn's opening message.
                opening = {int(r["turn"]): int(r["turn_start_seq"]) for r in rows}
                lower = min(opening[t] for t in needed)
                if from_seq is not None:
                    lower = max(lower, from_seq)
                if lower < events[0].seq:
                    prefix = rows_to_events(
                        conn.execute(
                            f"SELECT {EVENT_COLUMNS} FROM {src} WHERE session_id = ?"
                            " AND seq >= ? AND seq < ? ORDER BY seq",
                            (*pre, session_id, lower, events[0].seq),
                        ).fetchall()
                        if lineage is None
                        else select_ordered(
                            conn, session_id, lineage, "seq >= ? AND seq < ?",
                            [lower, events[0].seq], desc=False, limit=None,
                        )
                    )  # fmt: skip
        loaded = [*prefix, *events]
        complete = from_seq is None and (
            not loaded
            or conn.execute(
                f"SELECT 1 FROM {src} WHERE session_id = ? AND seq < ? LIMIT 1",
                (*pre, session_id, loaded[0].seq),
            ).fetchone()
            is None
        )
    finally:
        conn.execute("COMMIT")
    return ContextWindow(
        events=window_from(loaded, len(prefix)),
        state=state,
        suffix=loaded,
        complete=complete,
        record=record,
    )


def read_context_window_at(
    path: Path, session_id: str, limit: int, *, busy_timeout_ms: int = 5000
) -> ContextWindow | None:
    """The window of the session's default context build (the last ``limit`` events
    from its latest compaction record on), read on a read-only connection of its own
    (synchronous: a worker thread, beside the agent's writer); ``None`` when the session
    is gone."""
    conn = connect(path, synchronous="NORMAL", busy_timeout_ms=busy_timeout_ms, readonly=True)
    try:
        return read_context_window(conn, session_id, limit, None, True)
    except NotFoundError:
        return None
    finally:
        conn.close()
