"""Stored rows read back: sessions (metadata, state) and events (I/O helpers).

A row that cannot be read (``CorruptRecordError``) is skipped, logged and counted
(``SKIPPED_RECORDS``), so one bad row never makes a session unreadable.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from ..values.codec import hydrate_event
from ..values.errors import CorruptRecordError
from ..values.events import SessionEvent
from ..values.plans import SessionState

__all__ = [
    "EVENT_COLUMNS",
    "SESSION_STATE_COLUMNS",
    "SKIPPED_RECORDS",
    "SkippedRecords",
    "hydrate_or_skip",
    "read_session_state",
    "rows_to_events",
    "session_row",
    "session_state",
]

# The logger of ``sqlite_ops``, where these helpers were before they had a module.
log = logging.getLogger("session_server.storage.sqlite_ops")

EVENT_COLUMNS: Final = (
    "id, session_id, seq, action, content, metadata, created_at, turn, turn_start_seq, token_count"
)

_DECODER: Final = msgspec.json.Decoder()


def session_row(row: sqlite3.Row) -> dict[str, Any]:
    out = dict(row)
    raw = out.get("metadata")
    if raw is not None:
        try:
            out["metadata"] = _DECODER.decode(raw)
        except msgspec.DecodeError as exc:
            raise CorruptRecordError(
                f"session {out['id']!r}: field 'metadata' is not valid JSON"
            ) from exc
    return out


class SkippedRecords:
    """How many stored rows could not be read back (``CorruptRecordError``): each one is
    skipped and logged, so one bad row never makes a session unreadable."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def note(self, exc: CorruptRecordError) -> None:
        with self._lock:  # rows are read on worker threads
            self.count += 1
        log.warning("skipping an unreadable stored record: %s", exc.message)


SKIPPED_RECORDS: Final = SkippedRecords()


def hydrate_or_skip(row: sqlite3.Row) -> SessionEvent | None:
    """The event of ``row``, or ``None`` (logged and counted) when it cannot be read."""
    try:
        return hydrate_event(dict(row))
    except CorruptRecordError as exc:
        SKIPPED_RECORDS.note(exc)
        return None


def rows_to_events(rows: Sequence[sqlite3.Row]) -> list[SessionEvent]:
    """The events of ``rows``; rows that cannot be read are skipped (``SKIPPED_RECORDS``)."""
    events = []
    for row in rows:
        event = hydrate_or_skip(row)
        if event is not None:
            events.append(event)
    return events


SESSION_STATE_COLUMNS: Final = (
    "id, last_seq, last_turn, strategy, compaction_required, mirror_seq,"
    " snapshot_seq, snapshot_digest"
)


def session_state(row: sqlite3.Row | None) -> SessionState | None:
    """Hydrate a row of ``SESSION_STATE_COLUMNS`` (the strategy JSON decoded once)."""
    if row is None:
        return None
    raw = row["strategy"]
    try:
        strategy = None if raw is None else _DECODER.decode(raw)
    except msgspec.DecodeError as exc:
        raise CorruptRecordError(
            f"session {row['id']!r}: field 'strategy' is not valid JSON"
        ) from exc
    return SessionState(
        session_id=str(row["id"]),
        last_seq=int(row["last_seq"]),
        last_turn=int(row["last_turn"]),
        compaction_required=bool(row["compaction_required"]),
        mirror_seq=int(row["mirror_seq"]),
        strategy=strategy,
        snapshot_seq=int(row["snapshot_seq"]),
        snapshot_digest=row["snapshot_digest"],
    )


def read_session_state(conn: sqlite3.Connection, session_id: str) -> SessionState | None:
    return session_state(
        conn.execute(
            f"SELECT {SESSION_STATE_COLUMNS} FROM sessions WHERE id = ?", (session_id,)
        ).fetchone()
    )
