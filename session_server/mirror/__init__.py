"""JSONL mirror in the reference file layout, import/export and the memory view.

Pure modules: ``traces`` (event -> trace line), ``from_traces`` (trace line -> event),
``model`` (what the files of a session contain), ``snapshot`` (build/validate/restore,
plus a file reader), ``view`` (memory view and snapshot index). File I/O (synchronous):
``jsonl``, ``writer`` (live mirror and reconciliation), ``export``, ``import_``,
``view_files``. Nothing here imports asyncio, aiosqlite or websockets.
"""

from __future__ import annotations

from .export import ExportResult, export_session
from .import_ import ImportResult, find_reference_folder, import_reference_folder
from .model import render_mirror
from .snapshot import (
    SNAPSHOT_FILE,
    RestoredSnapshot,
    build_snapshot,
    load_snapshot_cache,
    read_snapshot,
    restore_snapshot,
    validate_snapshot,
)
from .traces import events_to_traces
from .view import MemoryViewOptions, build_conversation_view, build_memory_view, format_memory_view
from .view_files import list_snapshots, read_memory_view, resolve_memory_folder
from .writer import MirrorWriter, reconcile_session_dir

__all__ = [
    "SNAPSHOT_FILE",
    "ExportResult",
    "ImportResult",
    "MemoryViewOptions",
    "MirrorWriter",
    "RestoredSnapshot",
    "build_conversation_view",
    "build_memory_view",
    "build_snapshot",
    "events_to_traces",
    "export_session",
    "find_reference_folder",
    "format_memory_view",
    "import_reference_folder",
    "list_snapshots",
    "load_snapshot_cache",
    "read_memory_view",
    "read_snapshot",
    "reconcile_session_dir",
    "render_mirror",
    "resolve_memory_folder",
    "restore_snapshot",
    "validate_snapshot",
]
