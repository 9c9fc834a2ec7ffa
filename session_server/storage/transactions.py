"""Write transactions and their errors: ``BEGIN IMMEDIATE`` ... ``COMMIT`` (I/O).

``write_txn`` runs a transaction body and rolls back on any failure, so a refused or
failed write leaves nothing behind; SQLite's errors become the project's
(``StorageError``, a unique-constraint violation ``ConflictError``, a full disk named).
"""

from __future__ import annotations

import contextlib
import sqlite3
from typing import Any

from ..values.errors import ConflictError, StorageError
from .recall_pending import index_pending
from .turn_log import RecordingConnection, TurnLog

__all__ = ["project_error", "storage_error", "write_txn"]


def storage_error(exc: sqlite3.Error, what: str) -> StorageError:
    """A ``StorageError`` saying what failed; a full disk is named as such."""
    full = getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(
        exc
    )
    if full:
        return StorageError(
            f"{what} failed: the disk is full ({exc}); nothing was written",
            data={"reason": "disk_full", "sqlite_error": str(exc)},
        )
    return StorageError(f"{what} failed: {exc}", data={"sqlite_error": str(exc)})


def write_txn(
    conn: sqlite3.Connection, what: str, body: Any, *args: Any, turn_log: TurnLog | None = None
) -> Any:
    """Run ``body(conn, *args)`` inside ``BEGIN IMMEDIATE`` ... ``COMMIT``.

    Any exception rolls back. SQLite errors become ``StorageError`` (a unique-constraint
    violation becomes ``ConflictError``); the project's own errors pass through.
    ``turn_log`` (cluster mode): the body runs on a ``RecordingConnection`` and the
    transaction's record passes ``turn_log.commit_point`` before ``COMMIT`` (the one
    commit point of every durable write, ``storage/turn_log.py``).
    """
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.Error as exc:
        raise storage_error(exc, what) from exc
    try:
        if turn_log is None:
            result = body(conn, *args)
            index_pending(conn)  # the events it wrote, in its own transaction
        else:
            recording = RecordingConnection(conn)
            result = body(recording, *args)
            index_pending(recording)  # type: ignore[arg-type]
            if recording.statements:
                turn_log.commit_point(conn, recording.record(what))
                try:
                    conn.execute("COMMIT")
                except BaseException:
                    turn_log.uncommitted()  # the log has a record the file lacks
                    raise
                return result
        conn.execute("COMMIT")
        return result
    except BaseException as exc:
        if conn.in_transaction:
            # SQLite may already have rolled back after a hard failure.
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
        mapped = project_error(exc, what)
        if mapped is not exc:
            raise mapped from exc
        raise


def project_error(exc: BaseException, what: str) -> BaseException:
    """A SQLite error as the project's (a unique-constraint violation is a conflict);
    any other exception as it is."""
    if isinstance(exc, sqlite3.IntegrityError):
        return ConflictError(f"{what}: an id already exists ({exc})", data={"field": "id"})
    if isinstance(exc, sqlite3.Error):
        return storage_error(exc, what)
    return exc
