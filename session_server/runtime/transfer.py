"""Export a session to, and import one from, the reference file layout (I/O shell).

Export writes ``OUT/agents/<name>/`` (raw traces, archive, episodic, semantic, snapshot)
from SQLite, the source of truth, not from the live mirror, plus ``session_rows.jsonl``:
every row SQLite holds about the session, read in one snapshot (``values.session_rows``).

Import of such a folder is lossless: the session comes back with its id, its events'
ids, seqs, timestamps, metadata, reasoning, system messages and compaction records, its
metadata and strategy (``new_ids``: a copy under a fresh session id and fresh event
ids). A folder without that file (or whose JSONL files changed since the export) is read
leniently from the reference files into a new session. Either way one transaction
writes it: the session exists with all its events, or (on any error) not at all. Every
file operation runs on the registry's worker threads, never on the event loop.

The session's memory blocks travel beside them as ``blocks.jsonl`` (every revision); an
import writes them, after the session, in a transaction of their own (agent blocks are
the agent's, carried by its backup, not by a session's export).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from ..mirror.rows_file import ROWS_FILE
from ..mirror_io.block_files import read_blocks_file, write_blocks_file
from ..mirror_io.export import export_session as write_export
from ..mirror_io.import_ import find_reference_folder, import_reference_folder, read_rows_file
from ..storage.staging import staging
from ..values.blocks import BLOCKS_FILE, imported_revisions
from ..values.codec import hydrate_event
from ..values.errors import InvalidParamsError, TooLargeError
from ..values.events import SessionEvent
from ..values.session_rows import with_new_ids

if TYPE_CHECKING:
    from .actor import AgentActor

__all__ = ["REFERENCE_FILES", "export_files", "export_session", "import_files", "import_session"]

T = TypeVar("T")

# The only names an export folder holds; anything else in an RPC import is refused.
REFERENCE_FILES = (
    "raw_traces.jsonl",
    "raw_traces_archive.jsonl",
    "episodic.jsonl",
    "semantic.jsonl",
    "working_context_snapshot.json",
    ROWS_FILE,
    BLOCKS_FILE,
)


async def export_session(
    actor: AgentActor,
    session_id: str,
    out_dir: str | Path,
    *,
    name: str | None = None,
    progress: bool | None = None,
) -> dict[str, Any]:
    """Write one session to ``out_dir/agents/<name>/`` (name defaults to the agent id)."""
    rows = await actor.session_rows(session_id)  # NotFoundError for an unknown session
    # An export reads only: the snapshot is the context as it stands, never compacted now.
    ctx = await actor.current_context(session_id)
    blocks = await actor.blocks.revisions(actor, session_id)

    def write() -> tuple[Any, list[SessionEvent]]:
        # Rows become events here, on the worker: 200k of them are seconds of Python.
        events = [hydrate_event(msgspec.structs.asdict(r)) for r in rows.events]
        result = write_export(
            out_dir,
            name or actor.agent_id,
            events,
            messages=ctx.messages,
            system_instructions=ctx.system_instructions,
            progress=progress,
            rows=rows,
        )
        if write_blocks_file(result.folder, blocks):  # the session's blocks, with history
            result.files.append(BLOCKS_FILE)
        return result, events

    result, events = await _off_loop(actor, write)
    return {
        "folder": str(result.folder),
        "files": [Path(f).name for f in result.files],
        "trace_count": result.trace_count,
        "event_count": len(events),
        "last_seq": rows.session.last_seq,
    }


async def export_files(
    actor: AgentActor,
    session_id: str,
    *,
    name: str | None = None,
    max_bytes: int | None = None,
) -> dict[str, Any]:
    """Export to a temporary folder and return the files' text (for RPC callers).

    With ``max_bytes`` (the answer bound), a session whose events alone take more
    (``AgentActor.events_bytes``, summed in SQLite) is refused with -32004 before any
    row is read: the files hold every event at least once, so they could not be sent.
    """
    if max_bytes is not None:
        size = await actor.events_bytes(session_id)
        if size > max_bytes:
            raise TooLargeError(
                f"session_id: the session's events take about {size} bytes, more than the "
                f"{max_bytes} bytes an answer may hold (max_answer_bytes); export it with "
                "the CLI (session-server export) or read it with events.load pages",
                data={"field": "session_id", "bytes": size, "max_answer_bytes": max_bytes},
            )
    with contextlib.ExitStack() as stack:
        tmp = await _staged(actor, stack, "export")
        try:
            info = await export_session(actor, session_id, tmp, name=name, progress=False)
            folder = Path(info["folder"])

            def read() -> dict[str, str]:
                return {f: (folder / f).read_text(encoding="utf-8") for f in info["files"]}

            files = await _off_loop(actor, read)
        finally:
            await _off_loop(actor, stack.close)
    return {"name": folder.name, "files": files, "trace_count": info["trace_count"]}


async def import_session(
    actor: AgentActor,
    folder: str | Path,
    *,
    session_id: str | None = None,
    new_ids: bool = False,
    progress: bool | None = None,
) -> dict[str, Any]:
    """Import an export folder (or any reference folder); returns the session id and counts.

    ``lossless`` in the answer says which way it went (see the module doc); ``note`` says
    why a ``session_rows.jsonl`` beside the files was not used.
    """
    where = await _off_loop(actor, functools.partial(find_reference_folder, folder))
    block_items = await _off_loop(actor, functools.partial(read_blocks_file, where))
    imported_revisions(block_items, None)  # refused before anything is written
    parsed, why = await _off_loop(
        actor, functools.partial(read_rows_file, where, progress=progress)
    )
    if parsed is not None:
        rows = parsed.rows
        rows.session.agent_id = actor.agent_id  # the session now belongs to this agent
        if new_ids or (session_id is not None and session_id != rows.session.id):
            copy = functools.partial(
                with_new_ids, rows, session_id or str(uuid.uuid4()), new_event_ids=new_ids
            )
            rows = await _off_loop(actor, copy)  # a copy of every row
        await actor.import_rows(rows)
        if block_items:
            revisions = imported_revisions(block_items, rows.session.id)
            await actor.blocks.import_revisions(actor, rows.session.id, revisions)
        return {
            "session_id": rows.session.id,
            "name": where.name,
            "event_count": len(rows.events),
            "last_seq": rows.session.last_seq,
            "lossless": True,
        }
    imported = await _off_loop(
        actor, functools.partial(import_reference_folder, where, progress=progress)
    )
    # One transaction creates the session with every event: all of it, or nothing.
    sid, result = await actor.import_events(
        imported.events, session_id=session_id, metadata={"imported_from": imported.name}
    )
    if block_items:
        await actor.blocks.import_revisions(actor, sid, imported_revisions(block_items, sid))
    return {
        "session_id": sid,
        "name": imported.name,
        "trace_count": imported.trace_count,
        "event_count": len(result.seqs),
        "last_seq": result.last_seq,
        "lossless": False,
        "note": why,
    }


async def import_files(
    actor: AgentActor,
    files: Mapping[str, str],
    *,
    session_id: str | None = None,
    new_ids: bool = False,
) -> dict[str, Any]:
    """Import reference files given as ``{file name: text}`` (for RPC callers)."""
    # Named in the refusal: the first few only (a client may send many thousands).
    unknown = list(itertools.islice((n for n in files if n not in REFERENCE_FILES), 5))
    if unknown:
        more = len(files) - sum(n in files for n in REFERENCE_FILES) - len(unknown)
        named = ", ".join(repr(n[:128]) for n in unknown) + (f" and {more} more" if more else "")
        raise InvalidParamsError(
            f"files: unknown file name(s) {named}; expected some of {list(REFERENCE_FILES)}",
            data={"field": "files"},
        )
    if not files:
        raise InvalidParamsError("files: no reference files given", data={"field": "files"})

    def write(tmp: Path) -> Path:
        folder = tmp / "agents" / "import"
        folder.mkdir(parents=True)
        for name, text in files.items():
            (folder / name).write_text(text, encoding="utf-8")
        return folder

    with contextlib.ExitStack() as stack:
        tmp = await _staged(actor, stack, "import")
        try:
            folder = await _off_loop(actor, functools.partial(write, tmp))
            return await import_session(
                actor, folder, session_id=session_id, new_ids=new_ids, progress=False
            )
        finally:
            await _off_loop(actor, stack.close)


async def _staged(actor: AgentActor, stack: contextlib.ExitStack, kind: str) -> Path:
    """A staging folder in the memory dir (``storage.staging``), removed when ``stack``
    closes; what a SIGKILL leaves there is removed when the server next starts."""
    return await _off_loop(
        actor, functools.partial(stack.enter_context, staging(actor.host.memory_dir, kind))
    )


async def _off_loop(actor: AgentActor, fn: Callable[[], T]) -> T:
    """Run blocking file work on the registry's worker threads."""
    return await actor.host.executor.run(fn)
