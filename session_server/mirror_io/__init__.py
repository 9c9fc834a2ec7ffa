"""File I/O of the JSONL mirror (synchronous; the runtime calls it off the event loop).

``jsonl`` (line and atomic file primitives), ``writer`` (live mirror and crash
reconciliation), ``snapshot_files`` (reading the snapshot cache), ``export`` and
``import_`` (the flat reference root layout), ``view_files`` (the memory view from files).
"""

from __future__ import annotations

from .export import ExportResult, export_session
from .import_ import ImportResult, find_reference_folder, import_reference_folder
from .snapshot_files import load_snapshot_cache, read_snapshot
from .view_files import list_snapshots, read_memory_view, resolve_memory_folder
from .writer import MirrorWriter, reconcile_session_dir

__all__ = [
    "ExportResult",
    "ImportResult",
    "MirrorWriter",
    "export_session",
    "find_reference_folder",
    "import_reference_folder",
    "list_snapshots",
    "load_snapshot_cache",
    "read_memory_view",
    "read_snapshot",
    "reconcile_session_dir",
    "resolve_memory_folder",
]
