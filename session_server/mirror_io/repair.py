"""Repairing a session's mirror from SQLite, streamed, one file at a time (file I/O).

``repair_session_files(folder, source)`` makes the four JSONL files equal what the
session's events render to (``mirror.streaming``), without holding the history in
memory: ``source`` gives passes over the events (oldest first, e.g. pages of a SQLite
cursor inside one read transaction), and each file is written as a stream into a
temporary file in the session folder, then compared with the file in place (size and
SHA-256, both streamed) and ``os.replace``\\ d over it only when it differs. Files are
done one after the other, so the repair needs free space for one file, the largest, and
never more. A file that should be empty is removed.

Passes: one over the compaction events (the archive plan and the episodic/semantic
items), one over all events for ``raw_traces.jsonl``, and one more for
``raw_traces_archive.jsonl`` when anything was archived. The model the writer goes on
from comes out of the active pass.

Also here: file stamps (size, mtime, ctime, inode) for the checkpoint, the folder removal of a deleted
session (renamed into the agent's ``.trash`` first, so it disappears at once even if the
process dies during the removal) and the orphan sweep of activation.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Final, Protocol

import msgspec

from ..mirror.checkpoint import FileStamps
from ..mirror.model import MirrorModel
from ..mirror.streaming import ArchivePlan, StreamRender, item_lines
from ..storage.file_modes import file_mode, make_dir
from ..values.events import SessionEvent
from .jsonl import fsync_dir

__all__ = [
    "ACTIVE_FILE",
    "ARCHIVE_FILE",
    "EPISODIC_FILE",
    "MIRROR_FILES",
    "SEMANTIC_FILE",
    "TRASH_DIR",
    "EventSource",
    "ListSource",
    "file_stamps",
    "move_to_trash",
    "remove_session_folder",
    "remove_session_folders",
    "repair_session_files",
    "sweep_orphans",
]

logger = logging.getLogger("session_server.mirror")

ACTIVE_FILE: Final = "raw_traces.jsonl"
ARCHIVE_FILE: Final = "raw_traces_archive.jsonl"
EPISODIC_FILE: Final = "episodic.jsonl"
SEMANTIC_FILE: Final = "semantic.jsonl"
MIRROR_FILES: Final[tuple[str, ...]] = (ACTIVE_FILE, ARCHIVE_FILE, EPISODIC_FILE, SEMANTIC_FILE)
# Inside the agent folder: where deleted session folders go before they are removed.
TRASH_DIR: Final = ".trash"

_ENCODER: Final = msgspec.json.Encoder()
_CHUNK: Final = 1 << 20


class EventSource(Protocol):
    """Passes over one session's events, every pass from the same state of SQLite."""

    def compactions(self) -> Iterator[SessionEvent]:
        """The ``compaction`` events, oldest first."""
        ...

    def events(self) -> Iterator[SessionEvent]:
        """Every event, oldest first."""
        ...


class ListSource:
    """An ``EventSource`` over events already in memory (tests, small callers)."""

    def __init__(self, events: Iterable[SessionEvent]) -> None:
        self._events = list(events)

    def compactions(self) -> Iterator[SessionEvent]:
        return (e for e in self._events if e.action == "compaction")

    def events(self) -> Iterator[SessionEvent]:
        return iter(self._events)


def file_stamps(folder: Path) -> FileStamps:
    """(size, mtime ns, ctime ns, inode) of each mirror file that exists in ``folder``."""
    out: FileStamps = {}
    for name in MIRROR_FILES:
        try:
            st = os.stat(folder / name)
        except FileNotFoundError:
            continue
        out[name] = (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    return out


def _file_digest(path: Path) -> tuple[int, str] | None:
    """(size, SHA-256) of ``path`` read in chunks; ``None`` when it does not exist."""
    digest = hashlib.sha256()
    size = 0
    try:
        with open(path, "rb") as f:
            while chunk := f.read(_CHUNK):
                digest.update(chunk)
                size += len(chunk)
    except FileNotFoundError:
        return None
    return size, digest.hexdigest()


class _StreamFile:
    """A temporary file in ``folder`` that lines are written to, created on the first
    line; knows the size and SHA-256 of what was written."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder = folder
        self.name = name
        self.size = 0
        self.digest = hashlib.sha256()
        self.tmp: str | None = None
        self._f: IO[bytes] | None = None
        self._pending: list[bytes] = []
        self._pending_size = 0

    def write(self, line: object) -> None:
        data = _ENCODER.encode(line) + b"\n"
        self.digest.update(data)
        self.size += len(data)
        self._pending.append(data)
        self._pending_size += len(data)
        if self._pending_size >= _CHUNK:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        if self._f is None:
            make_dir(self.folder)
            fd, self.tmp = tempfile.mkstemp(prefix=f".{self.name}.", suffix=".tmp", dir=self.folder)
            os.fchmod(fd, file_mode())
            self._f = os.fdopen(fd, "wb")
        self._f.write(b"".join(self._pending))
        self._pending = []
        self._pending_size = 0

    def finish(self, *, fsync: bool) -> bool:
        """Put the written content in place if it differs; whether the file changed."""
        path = self.folder / self.name
        existing = _file_digest(path)
        if self.size == 0:
            self.discard()
            if existing is None:
                return False
            path.unlink()
            return True
        if existing == (self.size, self.digest.hexdigest()):
            self.discard()
            return False
        self._flush()
        assert self._f is not None and self.tmp is not None
        if fsync:
            self._f.flush()
            os.fsync(self._f.fileno())
        self._f.close()
        self._f = None
        os.replace(self.tmp, path)
        self.tmp = None
        if fsync:
            fsync_dir(self.folder)
        return True

    def discard(self) -> None:
        self._pending = []
        if self._f is not None:
            self._f.close()
            self._f = None
        if self.tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.tmp)
            self.tmp = None


def _write_file(
    folder: Path, name: str, lines: Callable[[_StreamFile], None], *, fsync: bool
) -> bool:
    out = _StreamFile(folder, name)
    try:
        lines(out)
        return out.finish(fsync=fsync)
    finally:
        out.discard()


def _archive_in_order(plan: ArchivePlan, source: EventSource) -> Callable[[_StreamFile], None]:
    """Write the archived lines as they come: right when they come in compaction order
    (the usual case: compactions archive the oldest turns first)."""

    def write(out: _StreamFile) -> None:
        last = -1
        for group, line in StreamRender(plan).archive_lines(source.events()):
            if group < last:
                raise _OutOfOrder
            last = group
            out.write(line)

    return write


def _archive_sorted(plan: ArchivePlan, source: EventSource) -> Callable[[_StreamFile], None]:
    """Archived lines sorted by compaction in memory: only for compaction records that
    archive a turn after a later one (never written by this server's planner)."""

    def write(out: _StreamFile) -> None:
        routed = list(StreamRender(plan).archive_lines(source.events()))
        order = sorted(range(len(routed)), key=lambda i: (routed[i][0], i))
        for i in order:
            out.write(routed[i][1])

    return write


class _OutOfOrder(Exception):
    pass


def repair_session_files(
    folder: Path, source: EventSource, *, fsync: bool = True
) -> tuple[list[str], MirrorModel]:
    """Make the four JSONL files of ``folder`` equal the rendering of ``source``'s events.

    Returns the names of the files changed and the model after every event. Leftover
    temporary files are removed; the snapshot file is left alone (it is checked against
    its digest). Raises ``OSError`` on an I/O failure (a file is then old or new, never
    torn).
    """
    plan = ArchivePlan.from_compactions(source.compactions())
    episodic, semantic = item_lines(source.compactions())
    render = StreamRender(plan)
    changed: list[str] = []

    def active(out: _StreamFile) -> None:
        for line in render.active_lines(source.events()):
            out.write(line)

    def items(values: list[dict[str, object]]) -> Callable[[_StreamFile], None]:
        def write(out: _StreamFile) -> None:
            for item in values:
                out.write(item)

        return write

    steps: list[tuple[str, Callable[[_StreamFile], None]]] = [
        (ACTIVE_FILE, active),
        (ARCHIVE_FILE, _archive_in_order(plan, source)),
        (EPISODIC_FILE, items(episodic)),
        (SEMANTIC_FILE, items(semantic)),
    ]
    for name, lines in steps:
        try:
            done = _write_file(folder, name, lines, fsync=fsync)
        except _OutOfOrder:
            logger.warning("%s: archived lines out of compaction order, sorted in memory", folder)
            done = _write_file(folder, name, _archive_sorted(plan, source), fsync=fsync)
        if done:
            changed.append(name)
    if folder.is_dir():
        for leftover in folder.glob(".*.tmp"):
            leftover.unlink(missing_ok=True)
    return changed, render.model


def remove_session_folder(agent_dir: Path, folder: Path) -> None:
    """Remove a session's mirror folder: renamed into ``agent_dir/.trash`` first (one
    atomic step: it is gone from ``sessions/`` at once), then deleted."""
    remove_session_folders(agent_dir, [folder])


def remove_session_folders(agent_dir: Path, folders: Sequence[Path]) -> None:
    """``remove_session_folder`` of each of ``folders`` (``move_to_trash``), then the
    trash deleted."""
    move_to_trash(agent_dir, folders)
    shutil.rmtree(agent_dir / TRASH_DIR, ignore_errors=True)


def move_to_trash(agent_dir: Path, folders: Sequence[Path]) -> Path | None:
    """Rename each of ``folders`` into one new folder of ``agent_dir/.trash`` (each gone
    from ``sessions/`` in one atomic step), their parent synced once; that folder, for
    the caller to delete (``None``: nothing was moved). What a crash leaves in the trash
    is deleted by the next activation (``sweep_orphans``)."""
    trash = agent_dir / TRASH_DIR
    target: Path | None = None
    moved: set[Path] = set()
    for folder in folders:
        if not folder.is_dir():
            continue  # no folder: nothing was mirrored
        if target is None:
            make_dir(trash)
            target = Path(tempfile.mkdtemp(prefix="sessions.", dir=trash))
        with contextlib.suppress(FileNotFoundError):
            os.replace(folder, target / folder.name)
            moved.add(folder.parent)
    for parent in moved:
        with contextlib.suppress(FileNotFoundError):
            fsync_dir(parent)
    return target


def sweep_orphans(agent_dir: Path, orphans: Callable[[list[str]], list[str]]) -> list[str]:
    """Remove the session folders ``orphans(folder names)`` names and whatever a crash
    left in ``.trash``; returns the names removed."""
    sessions = agent_dir / "sessions"
    try:
        names = [p.name for p in sessions.iterdir() if p.is_dir()]
    except FileNotFoundError:
        names = []
    removed = orphans(names)
    for name in removed:
        remove_session_folder(agent_dir, sessions / name)
    shutil.rmtree(agent_dir / TRASH_DIR, ignore_errors=True)
    return removed
