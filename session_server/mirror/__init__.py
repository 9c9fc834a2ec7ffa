"""The JSONL mirror in the reference file layout, as pure mappings (no file I/O).

``traces`` (event -> trace line), ``from_traces`` (trace line -> event), ``model`` (what
the files of a session contain: a pure step returning file operations), ``snapshot``
(build, validate and restore ``working_context_snapshot.json`` payloads), ``view`` (the
memory view and the snapshot index). The files themselves are read and written by
``session_server.mirror_io``.
"""

from __future__ import annotations

from .model import render_mirror
from .snapshot import (
    SNAPSHOT_FILE,
    RestoredSnapshot,
    build_snapshot,
    restore_snapshot,
    validate_snapshot,
)
from .traces import events_to_traces
from .view import MemoryViewOptions, build_conversation_view, build_memory_view, format_memory_view

__all__ = [
    "SNAPSHOT_FILE",
    "MemoryViewOptions",
    "RestoredSnapshot",
    "build_conversation_view",
    "build_memory_view",
    "build_snapshot",
    "events_to_traces",
    "format_memory_view",
    "render_mirror",
    "restore_snapshot",
    "validate_snapshot",
]
