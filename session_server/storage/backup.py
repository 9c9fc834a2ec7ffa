"""Online backup and restore of whole agent files (synchronous I/O).

A backup folder holds ``<agent_id>.sqlite`` per agent and ``manifest.json``::

    {"format": "session-server/backup", "version": 1,
     "agents": {"<agent_id>": {"file": "<agent_id>.sqlite", "bytes": N, "sha256": "...",
                               "sessions": S, "events": E, "schema_version": V,
                               "created_at": ms}}}

``backup_agent`` copies a live agent file with SQLite's online backup API from a
read-only connection: it takes no lock a writer waits for (the agent lock is not taken,
WAL lets a server keep writing), and the copy is one consistent snapshot (one backup
step, one read transaction). The copy is written to a temporary name, converted to a
self-contained file (rollback journal mode: no ``-wal`` beside it), checked, fsynced
and renamed; the manifest is then rewritten the same way. A SIGKILL at any point leaves
either the previous state or a temporary file that no manifest names, and ``restore``
accepts only a file whose size and SHA-256 match its manifest entry, so a half-written
backup is never restored.

``restore_agent`` puts such a file back as ``agents/<agent_id>/agent.sqlite`` under the
agent lock (so never under a running server: that goes through the server, which closes
the agent first), refuses to replace an existing agent unless ``force``. The file is
first copied into the memory dir's staging folder (``storage.staging``) and checked
there (``storage.file_check``: only a file this server could have written passes; the
copy is migrated and its mirrors marked stale, so the JSONL mirror is rewritten from it
on activation); the agent's own file is untouched until the checked copy replaces it
by one atomic rename.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import msgspec

from ..values.agent_ids import validate_agent_id
from ..values.errors import AgentUnavailableError, ConflictError, InvalidParamsError, NotFoundError
from .file_check import check_agent_file
from .file_lock import try_exclusive_lock
from .file_modes import create_file, make_dir
from .schema import SCHEMA_VERSION
from .sqlite_open import connect
from .staging import staging
from .store_connections import LOCK_FILE  # the one lock an open agent holds
from .transactions import storage_error

__all__ = [
    "AGENT_FILE",
    "MANIFEST",
    "BackupEntry",
    "Manifest",
    "agent_held",
    "backup_agent",
    "check_staged",
    "file_sha256",
    "install_restore",
    "read_manifest",
    "restore_agent",
    "save_backup",
    "stage_restore",
    "verify_backup_file",
]

MANIFEST: Final = "manifest.json"
AGENT_FILE: Final = "agent.sqlite"
MIRROR_FOLDER: Final = "sessions"
FORMAT: Final = "session-server/backup"
VERSION: Final = 1
_CHUNK: Final = 1 << 20


class BackupEntry(msgspec.Struct, forbid_unknown_fields=True):
    """One agent in a backup folder."""

    file: str
    bytes: int
    sha256: str
    sessions: int
    events: int
    schema_version: int
    created_at: int


class Manifest(msgspec.Struct, forbid_unknown_fields=True):
    format: str = FORMAT
    version: int = VERSION
    agents: dict[str, BackupEntry] = msgspec.field(default_factory=dict)


def file_sha256(path: Path, progress: Callable[[int], object] | None = None) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
            if progress is not None:
                progress(len(chunk))
    return digest.hexdigest()


def _fsync_path(path: Path, *, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    create_file(tmp)
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_path(path.parent, directory=True)


def read_manifest(folder: Path) -> Manifest:
    """The folder's manifest (``InvalidParamsError`` when it is missing or not valid)."""
    path = folder / MANIFEST
    try:
        manifest = msgspec.json.decode(path.read_bytes(), type=Manifest)
    except FileNotFoundError:
        raise InvalidParamsError(
            f"{folder}: not a backup folder (no {MANIFEST})", data={"field": "path"}
        ) from None
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InvalidParamsError(
            f"{path}: not a valid backup manifest ({exc})", data={"field": MANIFEST}
        ) from None
    if manifest.format != FORMAT or manifest.version > VERSION:
        raise InvalidParamsError(
            f"{path}: format {manifest.format!r} version {manifest.version} is not readable",
            data={"field": MANIFEST},
        )
    return manifest


def _counts(conn: sqlite3.Connection) -> tuple[int, int, int]:
    sessions = int(conn.execute("SELECT count(*) FROM sessions").fetchone()[0])
    events = int(conn.execute("SELECT count(*) FROM events").fetchone()[0])
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    return sessions, events, version


def backup_agent(
    db_path: Path,
    out_dir: Path,
    agent_id: str,
    *,
    busy_timeout_ms: int = 5000,
    progress: Callable[[int], object] | None = None,
) -> BackupEntry:
    """Copy the agent file at ``db_path`` to ``out_dir/<agent_id>.sqlite`` and record it in
    the manifest (see the module doc). ``progress(n)`` is told the bytes written."""
    agent_id = validate_agent_id(agent_id)
    if not db_path.is_file():
        raise NotFoundError(f"agent {agent_id!r}: no {db_path}", data={"agent_id": agent_id})
    make_dir(out_dir)
    final = out_dir / f"{agent_id}.sqlite"
    tmp = out_dir / f".{agent_id}.sqlite.tmp-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    try:
        src = connect(db_path, synchronous="FULL", busy_timeout_ms=busy_timeout_ms, readonly=True)
        try:
            create_file(tmp)
            dst = sqlite3.connect(tmp, isolation_level=None)
            try:
                src.backup(dst)  # one step: one read transaction, a consistent snapshot
                dst.execute("PRAGMA journal_mode=DELETE")  # a single self-contained file
                if dst.execute("PRAGMA quick_check").fetchone()[0] != "ok":
                    raise AgentUnavailableError(f"agent {agent_id!r}: the copy fails quick_check")
                sessions, events, version = _counts(dst)
            finally:
                dst.close()
        finally:
            src.close()
        size = tmp.stat().st_size
        digest = file_sha256(tmp, progress)
        _fsync_path(tmp)
        os.replace(tmp, final)
        _fsync_path(out_dir, directory=True)
    except sqlite3.Error as exc:
        raise storage_error(exc, f"backup of agent {agent_id!r}") from exc
    finally:
        tmp.unlink(missing_ok=True)
    entry = BackupEntry(
        file=final.name,
        bytes=size,
        sha256=digest,
        sessions=sessions,
        events=events,
        schema_version=version,
        created_at=time.time_ns() // 1_000_000,
    )
    _record(out_dir, agent_id, entry)
    return entry


def _record(out_dir: Path, agent_id: str, entry: BackupEntry) -> None:
    """Name the (already renamed, fsynced) file in the manifest: the backup's commit."""
    try:
        manifest = read_manifest(out_dir)
    except InvalidParamsError:
        manifest = Manifest()  # a new folder (or a damaged manifest: rewritten whole)
    manifest.agents[agent_id] = entry
    _write_atomic(out_dir / MANIFEST, msgspec.json.format(msgspec.json.encode(manifest)) + b"\n")


def save_backup(out_dir: Path, agent_id: str, data: bytes, entry: BackupEntry) -> None:
    """Store a backup received as bytes (``agent.backup`` over RPC) like ``backup_agent``
    stores its copy: checked against ``entry``, written, fsynced, renamed, recorded."""
    agent_id = validate_agent_id(agent_id)
    if len(data) != entry.bytes or hashlib.sha256(data).hexdigest() != entry.sha256:
        raise InvalidParamsError(
            f"backup of agent {agent_id!r}: the bytes received do not match their digest",
            data={"agent_id": agent_id},
        )
    make_dir(out_dir)
    final = out_dir / f"{agent_id}.sqlite"
    _write_atomic(final, data)
    _record(out_dir, agent_id, msgspec.structs.replace(entry, file=final.name))


def verify_backup_file(path: Path, entry: BackupEntry, agent_id: str) -> None:
    """Refuse (``InvalidParamsError``) a file that is not the one the manifest describes,
    or not a usable agent database of a schema this program reads."""
    problem = ""
    if not path.is_file():
        problem = "the file is missing"
    elif path.stat().st_size != entry.bytes or file_sha256(path) != entry.sha256:
        problem = "its size or SHA-256 does not match the manifest (incomplete or changed)"
    else:
        try:
            conn = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
            try:
                ok = conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
                version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            finally:
                conn.close()
        except sqlite3.Error as exc:
            ok, version = False, 0
            problem = f"not a usable SQLite file ({exc})"
        if not problem and not ok:
            problem = "it fails SQLite's quick_check"
        elif not problem and not 1 <= version <= SCHEMA_VERSION:
            problem = f"schema version {version} is not readable by this program"
    if problem:
        raise InvalidParamsError(
            f"backup of agent {agent_id!r} ({path.name}): {problem}", data={"agent_id": agent_id}
        )


@contextlib.contextmanager
def _agent_lock(folder: Path, agent_id: str) -> Iterator[None]:
    make_dir(folder)
    fd = try_exclusive_lock(folder / LOCK_FILE)
    if fd is None:
        raise AgentUnavailableError(
            f"agent {agent_id!r} is open in another process (a running server): restore "
            "through that server (restore --url), or stop it first",
            data={"agent_id": agent_id},
        )
    try:
        yield
    finally:
        os.close(fd)


def agent_held(folder: Path) -> bool:
    """Whether another process holds the agent's lock right now (a server serving it)."""
    path = folder / LOCK_FILE
    if not path.exists():
        return False
    fd = try_exclusive_lock(path, create=False)
    if fd is None:
        return True
    os.close(fd)
    return False


def stage_restore(source: Path, entry: BackupEntry, agent_id: str, folder: Path) -> Path:
    """Copy the backup file ``source`` into the staging ``folder`` and check the copy
    (``verify_backup_file``, then ``file_check.check_agent_file``): the staged file,
    ready for ``install_restore``. Nothing outside ``folder`` is touched."""
    verify_backup_file(source, entry, agent_id)
    staged = folder / AGENT_FILE
    create_file(staged)
    shutil.copyfile(source, staged)  # keeps the new file's mode
    check_staged(staged, agent_id, field=source.name)
    return staged


def check_staged(staged: Path, agent_id: str, *, field: str) -> int:
    """``check_agent_file`` on a staged copy, then fsync it; its number of sessions."""
    try:
        sessions = check_agent_file(staged, field=field)
    except InvalidParamsError as exc:
        data = {**(exc.data or {}), "agent_id": agent_id}
        raise InvalidParamsError(
            f"restore of agent {agent_id!r}: {exc.message}", data=data
        ) from None
    _fsync_path(staged)
    return sessions


def install_restore(
    staged: Path, agent_dir: Path, agent_id: str, *, force: bool = False, locked: bool = False
) -> None:
    """Put the checked ``staged`` file in place as ``agent_dir/agent.sqlite`` by one
    atomic rename (it must be on the same file system: the memory dir's staging).

    Takes the agent lock unless the caller holds the agent closed itself (``locked``, the
    server). ``ConflictError`` when the agent exists and ``force`` is not given. Until
    the rename the agent's own file is untouched (its WAL folded in), so a SIGKILL at any
    moment leaves the old agent or the new one, never a mix.
    """
    with contextlib.ExitStack() as stack:
        if not locked:
            stack.enter_context(_agent_lock(agent_dir, agent_id))
        else:
            make_dir(agent_dir)
        target = agent_dir / AGENT_FILE
        if target.exists() and not force:
            raise ConflictError(
                f"agent {agent_id!r} already exists; restore with force to replace it",
                data={"agent_id": agent_id, "field": "force"},
            )
        if target.exists():
            _retire(target)
        os.replace(staged, target)
        _fsync_path(agent_dir, directory=True)
        # The JSONL mirror is derived data: rewritten from the restored file on activation.
        shutil.rmtree(agent_dir / MIRROR_FOLDER, ignore_errors=True)


def restore_agent(
    source: Path,
    entry: BackupEntry,
    agent_dir: Path,
    agent_id: str,
    *,
    memory_dir: Path,
    force: bool = False,
    locked: bool = False,
) -> None:
    """Restore the backup file ``source`` as ``agent_dir/agent.sqlite``: staged in
    ``memory_dir``'s staging folder, checked there, then put in place
    (``install_restore``). A refused file changes nothing."""
    with staging(memory_dir, "restore") as folder:
        try:
            staged = stage_restore(source, entry, agent_id, folder)
            install_restore(staged, agent_dir, agent_id, force=force, locked=locked)
        except sqlite3.Error as exc:
            raise storage_error(exc, f"restore of agent {agent_id!r}") from exc


def _retire(target: Path) -> None:
    """Fold the old file's WAL into it and remove ``-wal``/``-shm``: a WAL left beside the
    restored file would be replayed onto it."""
    with contextlib.suppress(sqlite3.Error):
        conn = sqlite3.connect(target, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=DELETE")
        finally:
            conn.close()
    for suffix in ("-wal", "-shm"):
        target.with_name(target.name + suffix).unlink(missing_ok=True)
