"""The turn log seam: every durable write of an agent passes one commit point (I/O).

``transactions.write_txn`` runs every write transaction of an agent file. When the store
has a turn log that records (cluster mode), the transaction body runs on a
``RecordingConnection``, which notes each statement that may write with its parameters;
just before ``COMMIT`` the log's ``commit_point`` gets the transaction as a
``TurnRecord`` and makes it durable elsewhere (a fenced JetStream append,
``runtime/cluster_log.py``); only when that returns does SQLite commit, and the file
stores the log sequence it applied (``APPLIED_SEQ_KEY``) in the same transaction. A
refusal raises, and ``write_txn`` rolls back.

``LocalTurnLog`` (single node, the default) records nothing and costs nothing: the store
keeps no turn log at all then, and ``write_txn`` runs as it always did.

``apply_entries`` is the other side: a node rebuilding an agent's file replays records
in log order on its writer connection, with the same seeded ``random()``.
"""

from __future__ import annotations

import random
import secrets
import sqlite3
import threading
from collections.abc import Awaitable, Iterable, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

from ..values.turn_records import (
    APPLIED_SEQ_KEY,
    OwnerMarker,
    Statement,
    TurnRecord,
    writes,
)

__all__ = [
    "LocalTurnLog",
    "LogTarget",
    "RecordingConnection",
    "TurnLog",
    "TurnLogSource",
    "applied_seq",
    "apply_entries",
    "install_random",
    "set_applied_seq",
]

_MAX_INT64: Final = (1 << 63) - 1


LogEntries = Sequence[tuple[int, "TurnRecord | OwnerMarker"]]


class LogTarget(Protocol):
    """The agent file as a turn log catches it up (``StoreConnections``)."""

    def log_applied_seq(self) -> Awaitable[int]: ...

    def apply_log(self, entries: LogEntries) -> Awaitable[int]: ...


class TurnLog(Protocol):
    """What the store asks of a turn log (see the module doc)."""

    async def attach(self, target: LogTarget) -> None:
        """At open, before anything reads the file: bring it up to the log (replay the
        records after its applied sequence)."""
        ...

    @property
    def records(self) -> bool:
        """Whether write transactions are recorded and passed to ``commit_point``."""
        ...

    def commit_point(self, conn: sqlite3.Connection, record: TurnRecord) -> None:
        """On the worker thread, inside the transaction, before ``COMMIT``: make
        ``record`` durable, then note the sequence it got (``set_applied_seq``). Raises
        to refuse the write (the transaction rolls back)."""
        ...

    async def erased(self) -> None:
        """A delete committed and the file's WAL was erased: make what the log and its
        snapshots held of the deleted rows unreadable (cluster mode: a key rotation)."""
        ...

    def uncommitted(self) -> None:
        """``COMMIT`` failed after ``commit_point`` returned: the log holds a record the
        file does not; the file must be caught up from the log before the next write."""
        ...


class TurnLogSource(Protocol):
    """Where an agent's turn log comes from when its store opens (cluster mode: the
    cluster node, which claims the agent or refuses with ``NotOwnerError``)."""

    async def acquire(self, agent_id: str, path: Path) -> TurnLog:
        """The turn log of ``agent_id``, whose file is ``path`` (not open yet)."""
        ...

    async def known(self, agent_id: str) -> bool:
        """Whether the agent exists in the cluster (some node claimed it), so that a read
        on a node without its file rebuilds it instead of answering not found."""
        ...


class LocalTurnLog:
    """The single-node turn log: records nothing (the store then keeps none)."""

    records: Final = False

    async def attach(self, target: LogTarget) -> None:
        return None

    def commit_point(self, conn: sqlite3.Connection, record: TurnRecord) -> None:
        return None

    async def erased(self) -> None:
        return None

    def uncommitted(self) -> None:
        return None


class _Draws(threading.local):
    """The generator ``random()`` draws from on this thread: a seeded one while a
    recorded (or replayed) statement runs, else ``None`` (the system's randomness)."""

    rng: random.Random | None = None


_draws = _Draws()
_system = random.SystemRandom()


def _random() -> int:
    rng = _draws.rng or _system
    return rng.randint(-_MAX_INT64 - 1, _MAX_INT64)


def _randomblob(n: Any) -> bytes:
    size = max(1, int(n)) if isinstance(n, int | float) else 1
    rng = _draws.rng
    return rng.randbytes(size) if rng is not None else secrets.token_bytes(size)


def install_random(conn: sqlite3.Connection) -> None:
    """Replace SQLite's ``random()`` and ``randomblob(n)`` on ``conn`` by ones a replay
    reproduces (seeded per recorded statement; the system's randomness elsewhere)."""
    conn.create_function("random", 0, _random)
    conn.create_function("randomblob", 1, _randomblob)


def _seeded(seed: int, index: int) -> random.Random:
    return random.Random(f"{seed}:{index}")


class RecordingConnection:
    """A writer connection that notes every statement that may write (``Statement``),
    each run with ``random()`` seeded by the transaction's seed and its index; every other
    attribute is the connection's own."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.seed = secrets.randbits(62)
        self.statements: list[Statement] = []

    def execute(self, sql: str, params: Any = (), /) -> sqlite3.Cursor:
        if not writes(sql):
            return self._conn.execute(sql, params)
        _draws.rng = _seeded(self.seed, len(self.statements))
        try:
            cursor = self._conn.execute(sql, params)
        finally:
            _draws.rng = None
        self.statements.append(Statement(sql, _plain(params)))
        return cursor

    def executemany(self, sql: str, seq_of_params: Iterable[Any], /) -> sqlite3.Cursor:
        rows = [_plain(p) for p in seq_of_params]
        _draws.rng = _seeded(self.seed, len(self.statements))
        try:
            cursor = self._conn.executemany(sql, rows)
        finally:
            _draws.rng = None
        self.statements.append(Statement(sql, rows, many=True))
        return cursor

    def executescript(self, script: str, /) -> sqlite3.Cursor:
        raise TypeError("executescript commits implicitly: not inside a recorded write")

    def cursor(self) -> sqlite3.Cursor:
        raise TypeError("a recorded write executes on its connection, not on a cursor")

    def record(self, what: str) -> TurnRecord:
        return TurnRecord(what, self.seed, self.statements)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def _plain(params: Any) -> Any:
    """Parameters as the log stores them (a list or a dict of plain values)."""
    if isinstance(params, dict):
        return dict(params)
    return [bytes(p) if isinstance(p, memoryview) else p for p in params]


def applied_seq(conn: sqlite3.Connection) -> int:
    """The log sequence the file has applied up to (0: none)."""
    row = conn.execute(
        "SELECT value FROM agent_settings WHERE key = ?", (APPLIED_SEQ_KEY,)
    ).fetchone()
    return int(row[0]) if row is not None else 0


def set_applied_seq(conn: sqlite3.Connection, seq: int) -> None:
    conn.execute(
        "INSERT OR REPLACE INTO agent_settings(key, value) VALUES (?, ?)",
        (APPLIED_SEQ_KEY, str(seq)),
    )


def apply_entries(
    conn: sqlite3.Connection, entries: Sequence[tuple[int, TurnRecord | OwnerMarker]]
) -> int:
    """Replay log entries (sequence, value) in one transaction on the writer ``conn``
    (``install_random`` done): each record's statements as recorded, and the applied
    sequence moved to the last. Entries at or below the applied sequence are skipped.
    Returns the applied sequence after it."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        done = applied_seq(conn)
        for seq, entry in entries:
            if seq <= done:
                continue
            if isinstance(entry, TurnRecord):
                for index, stmt in enumerate(entry.statements):
                    _draws.rng = _seeded(entry.seed, index)
                    try:
                        if stmt.many:
                            conn.executemany(stmt.sql, stmt.params)
                        else:
                            conn.execute(stmt.sql, stmt.params)
                    finally:
                        _draws.rng = None
            done = seq
        set_applied_seq(conn, done)
        conn.execute("COMMIT")
        return done
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
