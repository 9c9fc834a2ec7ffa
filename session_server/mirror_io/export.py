"""Export one session in the flat reference root layout (synchronous file I/O).

``OUT/agents/<name>/`` receives ``raw_traces.jsonl``, ``raw_traces_archive.jsonl``,
``episodic.jsonl``, ``semantic.jsonl`` (each only when non-empty, like the reference
fixtures) and ``working_context_snapshot.json``. The JSONL files are the same rendering
as the live mirror (``model.render_mirror``), so a session's mirror folder and its export
hold the same JSONL bytes. Reference files of an earlier export that this one does not
write are removed, so the folder describes this session only.

Given the session's SQLite rows, the export also writes ``session_rows.jsonl``
(``mirror.rows_file``): the lossless record, with the digests of the JSONL files above.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..mirror.model import RenderedMirror
from ..mirror.rows_file import ROWS_FILE, encode_rows, sha256
from ..mirror.snapshot import SNAPSHOT_FILE, build_snapshot
from ..process.progress import progress_bar
from ..storage.file_modes import make_dir
from ..values.agent_ids import validate_agent_id
from ..values.codec import event_to_message
from ..values.events import ContextMessage, SessionEvent
from ..values.session_rows import SessionRows
from .jsonl import atomic_write_bytes, atomic_write_json, encode_lines
from .repair import ACTIVE_FILE, ARCHIVE_FILE, EPISODIC_FILE, SEMANTIC_FILE

__all__ = ["ExportResult", "default_snapshot_messages", "export_session"]


@dataclass(slots=True)
class ExportResult:
    folder: Path
    files: list[str] = field(default_factory=list)
    trace_count: int = 0


def default_snapshot_messages(events: Sequence[SessionEvent]) -> list[ContextMessage]:
    """Every event's message, compaction events left out (a plain, uncompacted context)."""
    out: list[ContextMessage] = []
    for event in events:
        if event.action == "compaction":
            continue
        message = event_to_message(event)
        if message is not None:
            out.append(message)
    return out


def export_session(
    out_dir: str | Path,
    name: str,
    events: Sequence[SessionEvent],
    *,
    messages: Sequence[ContextMessage] | None = None,
    system_instructions: Sequence[str] = (),
    progress: bool | None = None,
    rows: SessionRows | None = None,
) -> ExportResult:
    """Write ``events`` (all of one session, oldest first) to ``out_dir/agents/<name>/``.

    ``name`` follows the agent id rules (it is a folder name and the snapshot's
    ``agent_id``). ``messages``/``system_instructions`` are the working context to store
    as the snapshot (pass the compaction-aware context); by default every non-compaction
    event's message. ``progress``: ``None`` shows a bar only on a terminal and only for a
    long export. ``rows``: the session's SQLite rows, written as ``session_rows.jsonl``.
    """
    name = validate_agent_id(name)
    folder = Path(out_dir) / "agents" / name
    rendered = RenderedMirror()
    bar = progress_bar(events, desc=f"export {name}", unit="event", progress=progress)
    for event in bar:
        for op in rendered.model.step(event):
            rendered.apply(op)
    bar.close()
    result = ExportResult(folder=folder, trace_count=len(rendered.active) + len(rendered.archive))
    make_dir(folder)
    digests: dict[str, str] = {}
    for file_name, items in (
        (ACTIVE_FILE, rendered.active),
        (ARCHIVE_FILE, rendered.archive),
        (EPISODIC_FILE, rendered.episodic),
        (SEMANTIC_FILE, rendered.semantic),
    ):
        path = folder / file_name
        if items:
            data = encode_lines(items)
            atomic_write_bytes(path, data, fsync=False)
            digests[file_name] = sha256(data)
            result.files.append(file_name)
        else:
            path.unlink(missing_ok=True)
    if rows is None:
        (folder / ROWS_FILE).unlink(missing_ok=True)
    else:
        atomic_write_bytes(folder / ROWS_FILE, encode_rows(rows, digests), fsync=False)
        result.files.append(ROWS_FILE)
    snapshot = build_snapshot(
        agent_id=name,
        messages=default_snapshot_messages(events) if messages is None else messages,
        system_instructions=system_instructions,
        epoch_id=rendered.model.epoch_id,
        last_compaction_ts=rendered.model.last_compaction_ts,
        last_seq=rendered.model.last_seq,
    )
    atomic_write_json(folder / SNAPSHOT_FILE, snapshot, fsync=False)
    result.files.append(SNAPSHOT_FILE)
    return result
