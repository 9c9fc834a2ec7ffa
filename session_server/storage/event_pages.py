"""A session's events streamed from SQLite for a mirror repair (synchronous I/O).

``SessionEventReader(path, session_id)`` opens its own read-only connection and one read
transaction, so every pass (``compactions()``, ``events()``) sees the same state of the
file while the agent's writer goes on. Rows come from a SQLite cursor in pages
(``fetchmany``), so a pass holds one page of events at a time, whatever the history's
length. Rows that cannot be read are skipped, logged and counted (``SKIPPED_RECORDS``).
It runs on a worker thread (the mirror chain), never on the event loop.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Final

from ..values.events import SessionEvent
from .lineage_sql import events_source
from .sqlite_open import connect
from .stored_rows import EVENT_COLUMNS, rows_to_events

__all__ = ["PAGE_EVENTS", "SessionEventReader"]

PAGE_EVENTS: Final = 500


class SessionEventReader:
    """Passes over one session's events from one read snapshot (an ``EventSource``)."""

    def __init__(self, path: Path, session_id: str, *, busy_timeout_ms: int = 5000) -> None:
        self.session_id = session_id
        self._conn = connect(
            path, synchronous="NORMAL", busy_timeout_ms=busy_timeout_ms, readonly=True
        )
        try:
            self._conn.execute("BEGIN")
            # The snapshot starts at the first read: take it now, before any pass.
            self._conn.execute("SELECT 1 FROM sessions LIMIT 1").fetchall()
        except BaseException:
            self._conn.close()
            raise

    def _pages(self, sql: str) -> Iterator[SessionEvent]:
        src, pre = events_source(self._conn, self.session_id)  # a fork's whole history
        cursor = self._conn.execute(sql.format(src=src), (*pre, self.session_id))
        try:
            while rows := cursor.fetchmany(PAGE_EVENTS):
                yield from rows_to_events(rows)
        finally:
            cursor.close()

    def compactions(self) -> Iterator[SessionEvent]:
        return self._pages(
            f"SELECT {EVENT_COLUMNS} FROM {{src}} WHERE session_id = ?"
            " AND action = 'compaction' ORDER BY seq"
        )

    def events(self) -> Iterator[SessionEvent]:
        return self._pages(f"SELECT {EVENT_COLUMNS} FROM {{src}} WHERE session_id = ? ORDER BY seq")

    def last_seq(self) -> int | None:
        """The session's last seq in this snapshot (``None``: the session is gone)."""
        row = self._conn.execute(
            "SELECT last_seq FROM sessions WHERE id = ?", (self.session_id,)
        ).fetchone()
        return None if row is None else int(row[0])

    def close(self) -> None:
        try:
            self._conn.execute("COMMIT")
        except sqlite3.Error:
            pass
        finally:
            self._conn.close()

    def __enter__(self) -> SessionEventReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
