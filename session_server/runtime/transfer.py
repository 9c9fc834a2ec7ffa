"""Export a session to, and import one from, the reference file layout (I/O shell).

Export writes ``OUT/agents/<name>/`` (raw traces, archive, episodic, semantic, snapshot)
from SQLite, the source of truth, not from the live mirror. Import reads such a folder
leniently into a new session in one atomic append: the session exists with all its
events, or (on any error) not at all. Every file operation runs on the registry's worker
threads, never on the event loop.
"""

from __future__ import annotations

import asyncio
import functools
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..core.errors import InvalidParamsError, NotFoundError
from ..mirror_io.export import export_session as write_export
from ..mirror_io.import_ import import_reference_folder

if TYPE_CHECKING:
    from .actor import AgentActor

__all__ = ["export_files", "export_session", "import_files", "import_session"]

T = TypeVar("T")

# The only names a reference folder holds; anything else in an RPC import is refused.
REFERENCE_FILES = (
    "raw_traces.jsonl",
    "raw_traces_archive.jsonl",
    "episodic.jsonl",
    "semantic.jsonl",
    "working_context_snapshot.json",
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
    if await actor.get_session(session_id) is None:
        raise NotFoundError.session(session_id)
    events = await actor.load_events(session_id, limit=None, tail=False)
    # An export reads only: the snapshot is the context as it stands, never compacted now.
    ctx = await actor.current_context(session_id)
    result = await _off_loop(
        actor,
        functools.partial(
            write_export,
            out_dir,
            name or actor.agent_id,
            events,
            messages=ctx.messages,
            system_instructions=ctx.system_instructions,
            progress=progress,
        ),
    )
    return {
        "folder": str(result.folder),
        "files": [Path(f).name for f in result.files],
        "trace_count": result.trace_count,
        "event_count": len(events),
    }


async def export_files(
    actor: AgentActor, session_id: str, *, name: str | None = None
) -> dict[str, Any]:
    """Export to a temporary folder and return the files' text (for RPC callers)."""
    tmp = await _off_loop(
        actor, functools.partial(tempfile.mkdtemp, prefix="session-server-export-")
    )
    try:
        info = await export_session(actor, session_id, tmp, name=name, progress=False)
        folder = Path(info["folder"])

        def read() -> dict[str, str]:
            return {f: (folder / f).read_text(encoding="utf-8") for f in info["files"]}

        files = await _off_loop(actor, read)
    finally:
        await _off_loop(actor, functools.partial(shutil.rmtree, tmp, ignore_errors=True))
    return {"name": folder.name, "files": files, "trace_count": info["trace_count"]}


async def import_session(
    actor: AgentActor,
    folder: str | Path,
    *,
    session_id: str | None = None,
    progress: bool | None = None,
) -> dict[str, Any]:
    """Import a reference folder into a new session; returns its id and counts."""
    imported = await _off_loop(
        actor, functools.partial(import_reference_folder, folder, progress=progress)
    )
    # One transaction creates the session with every event: all of it, or nothing.
    sid, result = await actor.import_events(
        imported.events, session_id=session_id, metadata={"imported_from": imported.name}
    )
    return {
        "session_id": sid,
        "name": imported.name,
        "trace_count": imported.trace_count,
        "event_count": len(result.seqs),
        "last_seq": result.last_seq,
    }


async def import_files(
    actor: AgentActor, files: Mapping[str, str], *, session_id: str | None = None
) -> dict[str, Any]:
    """Import reference files given as ``{file name: text}`` (for RPC callers)."""
    unknown = sorted(set(files) - set(REFERENCE_FILES))
    if unknown:
        raise InvalidParamsError(
            f"files: unknown file name(s) {unknown}; expected some of {list(REFERENCE_FILES)}",
            data={"field": "files"},
        )
    if not files:
        raise InvalidParamsError("files: no reference files given", data={"field": "files"})

    def write(tmp: str) -> Path:
        folder = Path(tmp) / "agents" / "import"
        folder.mkdir(parents=True)
        for name, text in files.items():
            (folder / name).write_text(text, encoding="utf-8")
        return folder

    tmp = await _off_loop(
        actor, functools.partial(tempfile.mkdtemp, prefix="session-server-import-")
    )
    try:
        folder = await _off_loop(actor, functools.partial(write, tmp))
        return await import_session(actor, folder, session_id=session_id, progress=False)
    finally:
        await _off_loop(actor, functools.partial(shutil.rmtree, tmp, ignore_errors=True))


async def _off_loop(actor: AgentActor, fn: Callable[[], T]) -> T:
    """Run blocking file work on the registry's worker threads."""
    return await asyncio.get_running_loop().run_in_executor(actor.host.executor, fn)
