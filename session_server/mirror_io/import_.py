"""Import a reference memory folder into events for a new session (synchronous file I/O).

A reference folder is ``<root>/agents/<name>/`` (or the same files in the folder given):
``raw_traces_archive.jsonl`` then ``raw_traces.jsonl`` (read in that order: the archive
holds the older turns), ``episodic.jsonl``, ``semantic.jsonl`` and
``working_context_snapshot.json`` (returned only as a validated cache; never needed).
Reading is lenient: blank or malformed lines are skipped with a warning naming the file
and line, ``ts`` may be an int, ids are opaque.

When the folder has archived traces or episodic/semantic items, one ``summarize``
compaction event is inserted right after the events of the archived lines, with the
record in the compaction engine's format (``strategy: "summarize"``, ``turn_ids``,
``seq_range``, ``tail_start_seq``, ``tail_start_turn``, ``episodic``, ``semantic``, ...);
appending the events then recreates the same files, and the context builder shows the
archived turns as the memory block.
A folder written by our export also holds ``session_rows.jsonl`` (``mirror.rows_file``);
``read_rows_file`` reads it, and it is used, losslessly, instead of everything above as
long as the JSONL files are still the ones it was written with.

``seq`` values are set assuming the events are appended from ``first_seq`` on (1 for a
new session); the store may reassign them, but the compaction record refers to them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..mirror.from_traces import TraceEntry, traces_to_events
from ..mirror.rows_file import ROWS_FILE, RowsFile, decode_rows, sha256
from ..mirror.snapshot import SNAPSHOT_FILE
from ..mirror.traces import ms_from_ts
from ..process.progress import progress_bar
from ..values.codec import new_event_id
from ..values.errors import InvalidParamsError
from ..values.events import SessionEvent
from ..values.turns import assign_turns
from ..values.validation import MAX_TIMESTAMP_MS
from .jsonl import read_bytes_or_empty, read_jsonl, read_jsonl_numbered
from .repair import ACTIVE_FILE, ARCHIVE_FILE, EPISODIC_FILE, MIRROR_FILES, SEMANTIC_FILE
from .snapshot_files import read_snapshot

__all__ = ["ImportResult", "find_reference_folder", "import_reference_folder", "read_rows_file"]


@dataclass(slots=True)
class ImportResult:
    """What a reference folder holds, as events ready to append to a new session."""

    name: str
    events: list[SessionEvent] = field(default_factory=list)
    compaction: dict[str, Any] | None = None
    snapshot: dict[str, Any] | None = None
    trace_count: int = 0


def _has_reference_files(folder: Path) -> bool:
    return any((folder / name).is_file() for name in (*MIRROR_FILES, SNAPSHOT_FILE, ROWS_FILE))


def find_reference_folder(path: str | Path) -> Path:
    """The folder holding the reference files: ``path`` itself, or its single agent.

    Accepts ``<root>``/``<root>/agents`` with exactly one agent folder, or the agent
    folder. Raises ``InvalidParamsError`` naming the path otherwise.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise InvalidParamsError(f"path {str(folder)!r}: not a folder", data={"field": "path"})
    if _has_reference_files(folder):
        return folder
    agents = folder / "agents" if (folder / "agents").is_dir() else folder
    candidates = sorted(p for p in agents.iterdir() if p.is_dir() and _has_reference_files(p))
    if len(candidates) == 1:
        return candidates[0]
    problem = (
        "holds no reference memory files"
        if not candidates
        else (f"holds {len(candidates)} agent folders; give one of them")
    )
    raise InvalidParamsError(f"path {str(folder)!r}: {problem}", data={"field": "path"})


def read_rows_file(folder: Path, *, progress: bool | None = None) -> tuple[RowsFile | None, str]:
    """The folder's ``session_rows.jsonl`` when it still describes the JSONL files beside it.

    Returns ``(rows, "")``, or ``(None, why)`` when there is no such file or the JSONL files
    are not the ones it was written with (edited, added or removed since the export; then
    the reference files are the truth). A rows file that is itself damaged is refused
    (``InvalidParamsError`` naming the line): it never silently turns into a lossy import.
    """
    path = folder / ROWS_FILE
    if not path.is_file():
        return None, f"no {ROWS_FILE}"
    lines = path.read_bytes().splitlines()
    bar = progress_bar(lines, desc=f"import {folder.name}", unit="row", progress=progress)
    try:
        parsed = decode_rows(bar)
    finally:
        bar.close()
    present = {
        name: sha256(data) for name in MIRROR_FILES if (data := read_bytes_or_empty(folder / name))
    }
    if present != parsed.files:
        changed = sorted(set(present.items()) ^ set(parsed.files.items()))
        names = sorted({name for name, _ in changed})
        return None, f"{ROWS_FILE} ignored: {', '.join(names)} changed since the export"
    return parsed, ""


def _entries(folder: Path) -> list[TraceEntry]:
    entries: list[TraceEntry] = []
    for name, archived in ((ARCHIVE_FILE, True), (ACTIVE_FILE, False)):
        path = folder / name
        entries.extend(
            TraceEntry(f"{path}:{number}", line, archived)
            for number, line in read_jsonl_numbered(path)
        )
    return entries


def import_reference_folder(
    path: str | Path,
    *,
    session_id: str = "",
    first_seq: int = 1,
    progress: bool | None = None,
) -> ImportResult:
    """Read a reference folder into events (see the module doc).

    ``progress``: ``None`` shows a bar only on a terminal and only for a long import;
    ``False`` never.
    """
    folder = find_reference_folder(path)
    entries = _entries(folder)
    bar = progress_bar(
        entries,
        desc=f"import {folder.name}",
        unit="line",
        progress=progress,
    )
    imported = traces_to_events(bar, session_id=session_id)
    bar.close()
    events = imported.events
    episodic = read_jsonl(folder / EPISODIC_FILE)
    semantic = read_jsonl(folder / SEMANTIC_FILE)
    result = ImportResult(name=folder.name, trace_count=len(entries))
    if imported.archived_turn_ids or episodic or semantic:
        result.compaction = _insert_compaction(
            events,
            imported.archived_until,
            imported.archived_turn_ids,
            episodic,
            semantic,
            session_id=session_id,
            first_seq=first_seq,
        )
    for i, event in enumerate(events):
        event.seq = first_seq + i
    result.events = events
    result.snapshot = read_snapshot(folder / SNAPSHOT_FILE)
    return result


def _ids(items: list[dict[str, Any]]) -> list[Any]:
    return [item["id"] for item in items if "id" in item]


def _insert_compaction(
    events: list[SessionEvent],
    k: int,
    turn_ids: list[str],
    episodic: list[dict[str, Any]],
    semantic: list[dict[str, Any]],
    *,
    session_id: str,
    first_seq: int,
) -> dict[str, Any]:
    """Insert the summarize compaction event after the first ``k`` events; its record."""
    turns, _ = assign_turns(events)
    tail_start_seq = first_seq + k + 1  # the event after the compaction event
    tail_start_turn = turns[k] if k < len(turns) else (turns[-1] + 1 if turns else 1)
    stamp = events[k - 1].timestamp if k else (events[0].timestamp if events else 0)
    last_item_ms = ms_from_ts(episodic[-1].get("ts")) if episodic else None
    if last_item_ms is not None and not 0 <= last_item_ms <= MAX_TIMESTAMP_MS:
        raise InvalidParamsError(
            f"{EPISODIC_FILE}: ts {episodic[-1].get('ts')!r} of the last item is not a time "
            f"this server stores (epoch seconds between 0 and {MAX_TIMESTAMP_MS // 1000})",
            data={"field": f"{EPISODIC_FILE}.ts"},
        )
    created = max(stamp, last_item_ms or 0)
    record: dict[str, Any] = {
        "version": 1,
        "strategy": "summarize",
        "boundary_seq": tail_start_seq,
        "boundary_turn": tail_start_turn,
        "tail_start_seq": tail_start_seq,
        "tail_start_turn": tail_start_turn,
        "turn_ids": turn_ids,
        "seq_range": [first_seq, first_seq + k - 1] if k else None,
        "episodic": episodic,
        "semantic": semantic,
        "added": {"episodic": _ids(episodic), "semantic": _ids(semantic)},
        "triggers": ["import"],
        "summarizer": "import",
        "source": "import",
        "created_at": created,
    }
    events.insert(
        k,
        SessionEvent(
            id=new_event_id(),
            session_id=session_id,
            timestamp=created,
            action="compaction",
            content=f"summarize compaction: {k} imported events before seq {tail_start_seq}",
            compacted_event_count=k,
            compaction=record,
        ),
    )
    return record
