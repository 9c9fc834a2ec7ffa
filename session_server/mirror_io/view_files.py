"""Read memory folders for the memory view and the snapshot index (synchronous file I/O).

A memory folder is either a session mirror folder
(``<memory_dir>/agents/<agent_id>/sessions/<session_id>/``) or a flat reference folder
(``<root>/agents/<agent_id>/`` holding the files directly, as exports and the reference
fixtures do). Missing files read as empty (``None`` for the snapshot); malformed lines are
skipped with a warning.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..mirror.snapshot import SNAPSHOT_FILE
from ..mirror.view import (
    MemoryViewOptions,
    SnapshotSummary,
    build_memory_view,
    page_snapshots,
    tail_lines_needed,
    window_shows_tail,
)
from ..values.agent_ids import validate_agent_id
from ..values.errors import NotFoundError, TooLargeError
from .jsonl import read_jsonl
from .repair import ACTIVE_FILE, ARCHIVE_FILE, EPISODIC_FILE, MIRROR_FILES, SEMANTIC_FILE
from .snapshot_files import read_snapshot
from .tail import BLOCK, TailReader
from .writer import validate_session_id

__all__ = [
    "MemoryFiles",
    "list_snapshot_summaries",
    "list_snapshots",
    "read_memory_folder",
    "read_memory_view",
    "read_trace_tail",
    "resolve_memory_folder",
    "summarize_folder",
]

_ALL_FILES = (*MIRROR_FILES, SNAPSHOT_FILE)


@dataclass(slots=True)
class MemoryFiles:
    """The parsed contents of one memory folder."""

    snapshot: dict[str, Any] | None = None
    episodic: list[dict[str, Any]] = field(default_factory=list)
    semantic: list[dict[str, Any]] = field(default_factory=list)
    raw_active: list[dict[str, Any]] = field(default_factory=list)
    raw_archive: list[dict[str, Any]] = field(default_factory=list)


def read_memory_folder(
    folder: Path, options: MemoryViewOptions | None = None, *, max_bytes: int | None = None
) -> MemoryFiles:
    """Parse the files of ``folder`` that ``options`` need (all by default).

    ``max_bytes`` (the answer bound): a limited view whose newest lines to show take more
    than twice that is refused (-32004) as soon as they are read (``read_trace_tail``)."""
    opts = options or MemoryViewOptions()
    files = MemoryFiles()
    if opts.include_working_context:
        files.snapshot = read_snapshot(folder / SNAPSHOT_FILE)
    if opts.include_episodic:
        files.episodic = read_jsonl(folder / EPISODIC_FILE)
    if opts.include_semantic:
        files.semantic = read_jsonl(folder / SEMANTIC_FILE)
    if opts.include_raw_traces or opts.include_conversation:
        need = tail_lines_needed(opts)
        if need is not None:
            # Limited: only the newest lines, read from the end (the archive's only when
            # the active file has too few); the window holds both files' lines in order.
            files.raw_active = read_trace_tail(folder, opts, need, max_bytes=max_bytes)
            return files
        files.raw_active = read_jsonl(folder / ACTIVE_FILE)
        if opts.include_archive:
            files.raw_archive = read_jsonl(folder / ARCHIVE_FILE)
    return files


def read_trace_tail(
    folder: Path,
    options: MemoryViewOptions,
    need: int,
    *,
    block: int | None = None,
    max_bytes: int | None = None,
) -> list[dict[str, Any]]:
    """The newest trace lines of ``folder`` (archive lines before active ones) that the
    limited view ``options`` needs (``mirror.view.window_shows_tail``), oldest first.

    Starts with ``need`` lines and doubles the window until it suffices or both files are
    read whole; what is read is about what is shown, however long the history.

    With ``max_bytes``: the ``need`` newest lines are shown, each as an entry about as
    large as its line at least; once they took more than twice ``max_bytes`` the answer
    could not be sent, so the view is refused (-32004) without reading further (a limit
    larger than the history would otherwise read the files whole).
    """
    names = [ACTIVE_FILE, ARCHIVE_FILE] if options.include_archive else [ACTIVE_FILE]
    newest_first: list[dict[str, Any]] = []
    want = max(1, need)
    with contextlib.ExitStack() as stack:
        readers = [
            stack.enter_context(TailReader(folder / name, block=block or BLOCK)) for name in names
        ]
        lines = (line for reader in readers for line in reader)
        while True:
            for line in lines:
                newest_first.append(line)
                if max_bytes is not None and len(newest_first) <= need:
                    read = sum(r.bytes_read for r in readers)
                    if read > 2 * max_bytes + (block or BLOCK) * len(readers):
                        raise _too_large(read, max_bytes, limited=True)
                if len(newest_first) >= want:
                    break
            window = newest_first[::-1]
            if all(r.exhausted for r in readers) or window_shows_tail(window, options):
                return window
            want *= 2


def _too_large(size: int, max_bytes: int, *, limited: bool) -> TooLargeError:
    what = "the traces to show take more than" if limited else "the traces take"
    give = "smaller limits" if limited else "raw_trace_limit and conversation_limit"
    return TooLargeError(
        f"raw_trace_limit: {what} {size} bytes, more than the answer could hold "
        f"({max_bytes} bytes, max_answer_bytes); give {give} (or leave those parts out)",
        data={"field": "raw_trace_limit", "bytes": size, "max_answer_bytes": max_bytes},
    )


def _mtime(folder: Path) -> float | None:
    times: list[float] = []
    for name in _ALL_FILES:
        try:
            times.append((folder / name).stat().st_mtime)
        except OSError:
            continue
    return max(times) if times else None


def resolve_memory_folder(
    memory_dir: str | Path, agent_id: str, session_id: str | None = None
) -> Path:
    """The folder to view for an agent (and session).

    With ``session_id``: that session's mirror folder. Without: the agent folder when it
    holds reference files directly, else its most recently updated session folder.
    Raises ``NotFoundError`` when there is nothing to view.
    """
    agent_dir = Path(memory_dir) / "agents" / validate_agent_id(agent_id)
    if session_id is not None:
        folder = agent_dir / "sessions" / validate_session_id(session_id)
        if not folder.is_dir():
            raise NotFoundError(
                f"session_id {session_id!r}: no mirror folder for agent {agent_id!r}",
                data={"field": "session_id"},
            )
        return folder
    if _mtime(agent_dir) is not None:
        return agent_dir
    sessions = agent_dir / "sessions"
    candidates = [(t, p.name, p) for p in _subdirs(sessions) if (t := _mtime(p)) is not None]
    if not candidates:
        raise NotFoundError(f"agent_id {agent_id!r}: no memory files", data={"field": "agent_id"})
    return max(candidates)[2]


def read_memory_view(
    memory_dir: str | Path,
    agent_id: str,
    *,
    session_id: str | None = None,
    options: MemoryViewOptions | None = None,
    max_bytes: int | None = None,
) -> dict[str, Any]:
    """The memory view (``view.build_memory_view``) of an agent's folder on disk.

    With ``max_bytes`` (the answer bound), a view that asks for traces without a limit
    is refused (-32004) before reading when the trace files it would read are larger
    than twice that: every line becomes an entry at least about as large, so the answer
    could not be sent, and reading it all would only cost memory.
    """
    folder = resolve_memory_folder(memory_dir, agent_id, session_id)
    opts = options or MemoryViewOptions()
    if max_bytes is not None and tail_lines_needed(opts) is None:
        names = [ACTIVE_FILE, ARCHIVE_FILE] if opts.include_archive else [ACTIVE_FILE]
        size = sum(_size(folder / name) for name in names)
        if size > 2 * max_bytes:
            raise _too_large(size, max_bytes, limited=False)
    files = read_memory_folder(folder, options, max_bytes=max_bytes)
    is_session = folder.parent.name == "sessions" and folder.parent.parent.name == agent_id
    return build_memory_view(
        agent_id,
        snapshot=files.snapshot,
        episodic=files.episodic,
        semantic=files.semantic,
        raw_active=files.raw_active,
        raw_archive=files.raw_archive,
        options=options,
        session_id=folder.name if is_session else None,
    )


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _subdirs(folder: Path) -> list[Path]:
    try:
        return sorted(p for p in folder.iterdir() if p.is_dir())
    except OSError:
        return []


def summarize_folder(folder: Path, agent_id: str, session_id: str | None) -> SnapshotSummary | None:
    """Which files ``folder`` holds; ``None`` when it holds none."""
    updated = _mtime(folder)
    if updated is None:
        return None
    return SnapshotSummary(
        agent_id=agent_id,
        session_id=session_id,
        last_updated=updated,
        has_working_context=(folder / SNAPSHOT_FILE).is_file(),
        has_episodic=(folder / EPISODIC_FILE).is_file(),
        has_semantic=(folder / SEMANTIC_FILE).is_file(),
        has_raw_traces=(folder / ACTIVE_FILE).is_file(),
        has_raw_archive=(folder / ARCHIVE_FILE).is_file(),
    )


def list_snapshot_summaries(memory_dir: str | Path) -> list[SnapshotSummary]:
    """One summary per memory folder: flat agent folders and session mirror folders."""
    out: list[SnapshotSummary] = []
    for agent_dir in _subdirs(Path(memory_dir) / "agents"):
        flat = summarize_folder(agent_dir, agent_dir.name, None)
        if flat is not None:
            out.append(flat)
        for session_dir in _subdirs(agent_dir / "sessions"):
            summary = summarize_folder(session_dir, agent_dir.name, session_dir.name)
            if summary is not None:
                out.append(summary)
    return out


def list_snapshots(
    memory_dir: str | Path, *, search: str | None = None, page: int = 1, page_size: int = 50
) -> dict[str, Any]:
    """``memory.list_snapshots``: a page of summaries, newest first (see ``page_snapshots``)."""
    return page_snapshots(list_snapshot_summaries(memory_dir), search, page, page_size)
