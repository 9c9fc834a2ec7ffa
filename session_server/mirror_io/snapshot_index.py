"""The index behind ``memory.list_snapshots``: one row per memory folder, no folder scan.

Listing the snapshots used to stat five files in every session folder of every agent
(10k agents: 1.4 s per call). The server now keeps the summaries (``SnapshotSummary``)
in memory and on disk, in ``<memory_dir>/snapshot_index.sqlite``, which only the server
(the process that writes the mirror) writes:

- The mirror writer calls ``touch(agent, session)`` after each write into a session
  folder: a set insertion, nothing more on the append path. A listing re-reads only the
  folders touched since the last listing (``view_files.summarize_folder``).
- A session delete calls ``forget`` *before* its SQLite transaction: the entry leaves
  the index and a tombstone row is committed (fsync) to the file, so no listing, not
  even one rebuilt after a SIGKILL that left the folder behind, shows the session. A
  delete that fails calls ``unforget``. Until the folder is removed, a ``touch`` (a
  write scheduled before the delete, landing in the doomed folder) changes nothing. A
  tombstoned folder written again after the removal (a new session with the same id)
  loses its tombstone on the first ``touch`` that finds the folder there; a tombstone whose folder is gone is dropped at a clean stop.
- ``close`` (a clean stop) writes every entry and marks the file clean. Opening marks it
  unclean first; so after a crash, or when the file is missing, unreadable, of another
  version, or holds a row that fails validation, the index is rebuilt by one scan of the
  folders (on the caller's worker thread) that leaves out tombstoned folders.

One process owns the index: the server (any registry that writes the mirror, unless
told otherwise). Another process writing the mirror beside it (an offline CLI import)
uses ``owner=False``: its writes mark the file ``foreign``, which the owner never
clears at close, so the next start rebuilds the index and sees that process's folders
(the running server does not see them before that).

Everything is thread-safe (one lock): touches come from the mirror's worker threads,
listings from the RPC workers.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

from ..mirror.view import SnapshotSummary
from ..storage.file_modes import create_file, make_dir
from ..values.agent_ids import validate_agent_id
from ..values.errors import InvalidParamsError
from .view_files import list_snapshot_summaries, summarize_folder
from .writer import validate_session_id

__all__ = ["INDEX_FILE", "INDEX_VERSION", "SnapshotIndex"]

log = logging.getLogger(__name__)

INDEX_FILE: Final = "snapshot_index.sqlite"
INDEX_VERSION: Final = 1

Key = tuple[str, str | None]

_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS folders (
    agent_id TEXT NOT NULL,
    session_id TEXT NOT NULL,  -- '' for a flat agent folder
    last_updated REAL NOT NULL,
    flags INTEGER NOT NULL,
    PRIMARY KEY (agent_id, session_id)
);
CREATE TABLE IF NOT EXISTS tombstones (
    agent_id TEXT NOT NULL,
    session_id TEXT NOT NULL,
    PRIMARY KEY (agent_id, session_id)
);
"""

_FLAGS: Final = (
    "has_working_context",
    "has_episodic",
    "has_semantic",
    "has_raw_traces",
    "has_raw_archive",
)


def _flags(summary: SnapshotSummary) -> int:
    return sum(1 << i for i, name in enumerate(_FLAGS) if getattr(summary, name))


class _BadRow(Exception):
    pass


def _summary(
    agent_id: object, session_id: object, updated: object, flags: object
) -> SnapshotSummary:
    """A row read back from the file, validated (``_BadRow`` otherwise)."""
    try:
        agent = validate_agent_id(agent_id if isinstance(agent_id, str) else "")
        session = None if session_id == "" else validate_session_id(session_id)
    except InvalidParamsError as exc:
        raise _BadRow(exc.message) from None
    if isinstance(updated, int) and not isinstance(updated, bool):
        updated = float(updated)
    if not isinstance(updated, float) or not math.isfinite(updated):
        raise _BadRow(f"last_updated {updated!r} is not a finite number")
    if not isinstance(flags, int) or isinstance(flags, bool) or not 0 <= flags < 1 << len(_FLAGS):
        raise _BadRow(f"flags {flags!r} out of range")
    bits = {name: bool(flags & (1 << i)) for i, name in enumerate(_FLAGS)}
    return SnapshotSummary(agent_id=agent, session_id=session, last_updated=updated, **bits)


class SnapshotIndex:
    """The summaries of every memory folder under ``memory_dir`` (see the module doc)."""

    def __init__(self, memory_dir: str | Path, *, owner: bool = True) -> None:
        self.memory_dir = Path(memory_dir)
        self.owner = owner
        self.path = self.memory_dir / INDEX_FILE
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._entries: dict[Key, SnapshotSummary] | None = None  # None: not loaded yet
        self._dirty: set[Key] = set()
        self._tombstones: set[Key] = set()
        # Sessions whose delete began and whose folder is not removed yet: a touch then is
        # a write scheduled before the delete, never a new session under the same id.
        self._deleting: set[Key] = set()
        self._closed = False
        self._was_clean = False  # read from the file when it is first opened
        self.rebuilds = 0  # how many times the folders were scanned (tests, metrics)

    # -- the writer's side -------------------------------------------------------------
    def touch(self, agent_id: str, session_id: str) -> None:
        """A session folder was written: re-read its summary at the next listing."""
        key = (agent_id, session_id)
        with self._lock:
            conn = self._connect()  # loads the tombstones on first use
            if not self.owner:
                return
            present = self._folder(key).is_dir()
            if key in self._deleting:
                if present:
                    # A write scheduled before the delete landed in the doomed folder:
                    # the tombstone holds (a crash before the removal must not list it).
                    return
                self._deleting.discard(key)  # the removal: a later write is a new session
            self._dirty.add(key)
            # Written again (a new session under the id): listed again. The removal of
            # the deleted folder touches it too, and leaves the tombstone in place.
            if key in self._tombstones and present:
                self._tombstones.discard(key)
                if conn is not None:
                    with conn:
                        conn.execute(
                            "DELETE FROM tombstones WHERE agent_id = ? AND session_id = ?", key
                        )

    def forget(self, agent_id: str, session_id: str) -> None:
        """The session is being deleted: never list it again (durable before returning)."""
        self.forget_all(agent_id, [session_id])

    def forget_all(self, agent_id: str, session_ids: Sequence[str]) -> None:
        """``forget`` of each of ``session_ids``, their tombstones in one transaction."""
        keys = [(agent_id, sid) for sid in session_ids]
        with self._lock:
            for key in keys:
                self._tombstones.add(key)
                self._deleting.add(key)
                self._dirty.discard(key)
                if self._entries is not None:
                    self._entries.pop(key, None)
            conn = self._connect()
            if conn is not None:
                with conn:
                    conn.executemany("INSERT OR IGNORE INTO tombstones VALUES (?, ?)", keys)

    def unforget(self, agent_id: str, session_id: str) -> None:
        """The delete did not happen: list the folder again if it is there."""
        with self._lock:
            self._deleting.discard((agent_id, session_id))
        self.touch(agent_id, session_id)

    # -- the listing side --------------------------------------------------------------
    def summaries(self) -> list[SnapshotSummary]:
        """Every folder's summary (blocking: call it on a worker thread)."""
        with self._lock:
            entries = self._load()
            self._refresh(entries)
            return list(entries.values())

    def close(self) -> None:
        """Write every entry and mark the file clean (a clean stop)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            conn = self._conn
            if conn is None:
                return
            try:
                foreign = conn.execute("SELECT 1 FROM meta WHERE key = 'foreign'").fetchone()
                if self.owner and self._entries is None and self._was_clean:
                    self._entries = self._read(conn)  # never listed: saved rows + touches
                if self.owner and self._entries is not None and foreign is None:
                    self._refresh(self._entries)
                    tombstones = [k for k in self._tombstones if not self._folder(k).exists()]
                    with conn:
                        conn.execute("DELETE FROM folders")
                        conn.executemany(
                            "INSERT INTO folders VALUES (?, ?, ?, ?)",
                            (
                                (s.agent_id, s.session_id or "", s.last_updated or 0.0, _flags(s))
                                for s in self._entries.values()
                            ),
                        )
                        # A tombstone whose folder is gone has done its work.
                        conn.executemany(
                            "DELETE FROM tombstones WHERE agent_id = ? AND session_id = ?",
                            tombstones,
                        )
                        conn.execute("INSERT OR REPLACE INTO meta VALUES ('clean', '1')")
            except (sqlite3.Error, _BadRow) as exc:
                log.warning("%s: the snapshot index was not saved (%s)", self.path, exc)
            finally:
                conn.close()
                self._conn = None

    # -- internals (the lock is held) ----------------------------------------------------
    def _refresh(self, entries: dict[Key, SnapshotSummary]) -> None:
        """Re-read the summaries of the folders touched since the last listing."""
        dirty, self._dirty = self._dirty, set()
        for key in dirty:
            summary = summarize_folder(self._folder(key), *key)
            if summary is None:
                entries.pop(key, None)
            else:
                entries[key] = summary

    def _folder(self, key: Key) -> Path:
        folder = self.memory_dir / "agents" / key[0]
        return folder if key[1] is None else folder / "sessions" / key[1]

    def _connect(self) -> sqlite3.Connection | None:
        """The index file, opened (and marked unclean) on first use; ``None`` when it
        cannot be used (the index then lives in memory only and is rebuilt next time)."""
        if self._conn is not None or self._closed:
            return self._conn
        try:
            make_dir(self.memory_dir)
            create_file(self.path)  # its mode, and so its -wal and -shm (file_modes)
            # Implicit transactions for writes; ``with conn`` commits them.
            conn = sqlite3.connect(self.path, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.executescript(_SCHEMA)
            rows = conn.execute("SELECT agent_id, session_id FROM tombstones").fetchall()
            meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            self._was_clean = (
                meta.get("clean") == "1"
                and meta.get("version") == str(INDEX_VERSION)
                and "foreign" not in meta
            )
            # Unclean from now until close: a crash from here on means "rebuild".
            with conn:
                if self.owner:
                    conn.execute("INSERT OR REPLACE INTO meta VALUES ('clean', '0')")
                    conn.execute(
                        "INSERT OR REPLACE INTO meta VALUES ('version', ?)", (str(INDEX_VERSION),)
                    )
                    conn.execute("DELETE FROM meta WHERE key = 'foreign'")
                else:
                    conn.execute("INSERT OR REPLACE INTO meta VALUES ('foreign', '1')")
        except sqlite3.Error as exc:
            log.warning("%s: the snapshot index file is unusable (%s)", self.path, exc)
            return None
        self._tombstones |= {(str(a), str(s)) for a, s in rows}
        self._conn = conn
        return conn

    def _load(self) -> dict[Key, SnapshotSummary]:
        if self._entries is not None:
            return self._entries
        conn = self._connect()
        entries: dict[Key, SnapshotSummary] | None = None
        if conn is not None:
            try:
                entries = self._read(conn)
            except (sqlite3.Error, _BadRow) as exc:
                log.warning("%s: rebuilding the snapshot index (%s)", self.path, exc)
                entries = None
        if entries is None:
            entries = self._scan()
        self._entries = entries
        return entries

    def _read(self, conn: sqlite3.Connection) -> dict[Key, SnapshotSummary] | None:
        """The saved entries when the file was closed cleanly; ``None``: rebuild."""
        if not self._was_clean:
            log.info("%s: not closed cleanly (or new): rebuilding the snapshot index", self.path)
            return None
        entries: dict[Key, SnapshotSummary] = {}
        for row in conn.execute("SELECT agent_id, session_id, last_updated, flags FROM folders"):
            summary = _summary(*row)
            entries[(summary.agent_id, summary.session_id)] = summary
        return entries

    def _scan(self) -> dict[Key, SnapshotSummary]:
        self.rebuilds += 1
        return _keyed(
            s
            for s in list_snapshot_summaries(self.memory_dir)
            if s.session_id is None or (s.agent_id, s.session_id) not in self._tombstones
        )


def _keyed(summaries: Iterable[SnapshotSummary]) -> dict[Key, SnapshotSummary]:
    return {(s.agent_id, s.session_id): s for s in summaries}
