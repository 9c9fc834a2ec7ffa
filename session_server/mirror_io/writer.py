"""The live JSONL mirror of an agent's sessions (synchronous file I/O, called by the actor).

Files per session, in ``<memory_dir>/agents/<agent_id>/sessions/<session_id>/``:
``raw_traces.jsonl``, ``raw_traces_archive.jsonl``, ``episodic.jsonl``, ``semantic.jsonl``,
``working_context_snapshot.json``. SQLite is the truth; these files are derived.

Contract for the actor:

1. After every committed append, call ``append(session_id, events)`` with the committed
   events (seq, turn and timestamp filled). It returns the highest seq now mirrored (store
   it as the session's mirror cursor), or ``None`` when nothing could be mirrored (mirror
   off, session not activated, I/O error): leave the cursor where it was.
   Compaction events go through ``append`` too (``on_compaction`` is the same call).
2. The first time a session is touched in a process, call ``activate(session_id, events,
   verify=...)`` with all its events; pass ``verify=True`` when the cursor differs from the
   session's last seq (or always: verification reads the files once). A brand-new session
   (first event seq 1) needs no activation. After ``events.delete``, call ``reconcile``.
3. At the end of a turn and after a compaction, call ``write_snapshot``.

Hot path cost: ``append`` maps events to lines in memory and does one append-mode write;
it never reads a file. A summarize compaction reads and rewrites the active file once.
Crash safety: lines moved by a compaction are appended to the archive (fsync) before the
active file is atomically replaced, so a kill in between duplicates lines, never loses
them; ``activate(verify=True)``/``reconcile`` then rewrite every file that differs from a
fresh rendering of the events.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import msgspec

from ..core.agent_ids import validate_agent_id
from ..core.errors import InvalidParamsError
from ..core.events import ContextMessage, SessionEvent
from ..mirror.model import (
    AppendItems,
    AppendTraces,
    ArchiveTurns,
    MirrorModel,
    MirrorOp,
    render_mirror,
)
from ..mirror.snapshot import SNAPSHOT_FILE, build_snapshot
from .jsonl import (
    append_bytes,
    atomic_write_bytes,
    atomic_write_json,
    encode_lines,
    read_bytes_or_empty,
)

__all__ = [
    "ACTIVE_FILE",
    "ARCHIVE_FILE",
    "EPISODIC_FILE",
    "MIRROR_FILES",
    "SEMANTIC_FILE",
    "MirrorWriter",
    "reconcile_session_dir",
    "validate_session_id",
]

logger = logging.getLogger("session_server.mirror")

ACTIVE_FILE: Final = "raw_traces.jsonl"
ARCHIVE_FILE: Final = "raw_traces_archive.jsonl"
EPISODIC_FILE: Final = "episodic.jsonl"
SEMANTIC_FILE: Final = "semantic.jsonl"
MIRROR_FILES: Final[tuple[str, ...]] = (ACTIVE_FILE, ARCHIVE_FILE, EPISODIC_FILE, SEMANTIC_FILE)

_DECODER: Final = msgspec.json.Decoder()


def validate_session_id(session_id: object) -> str:
    """``session_id`` if it is safe as one folder name (same rules as agent ids)."""
    if not isinstance(session_id, str) or not session_id:
        raise InvalidParamsError(
            "session_id: must be a non-empty string", data={"field": "session_id"}
        )
    try:
        return validate_agent_id(session_id)
    except InvalidParamsError as exc:
        raise InvalidParamsError(
            exc.message.replace("agent_id", "session_id", 1), data={"field": "session_id"}
        ) from exc


def reconcile_session_dir(
    session_dir: Path, events: Sequence[SessionEvent], *, fsync: bool = True
) -> tuple[list[str], MirrorModel]:
    """Make the four JSONL files equal a fresh rendering of ``events``.

    Files are compared byte for byte and only those that differ are rewritten (temp file
    + ``os.replace``); a file that should be empty is removed. Leftover temp files are
    deleted. The snapshot is left alone (it is a cache, checked on restore). Returns the
    names of the files changed and the rebuilt per-session state.
    """
    rendered = render_mirror(events)
    expected = {
        ACTIVE_FILE: encode_lines(rendered.active),
        ARCHIVE_FILE: encode_lines(rendered.archive),
        EPISODIC_FILE: encode_lines(rendered.episodic),
        SEMANTIC_FILE: encode_lines(rendered.semantic),
    }
    changed: list[str] = []
    for name, data in expected.items():
        path = session_dir / name
        if read_bytes_or_empty(path) == data:
            continue
        if data:
            atomic_write_bytes(path, data, fsync=fsync)
            changed.append(name)
        elif path.exists():
            path.unlink()
            changed.append(name)
    if session_dir.is_dir():
        for leftover in session_dir.glob(".*.tmp"):
            leftover.unlink(missing_ok=True)
    return changed, rendered.model


class MirrorWriter:
    """Keeps the mirror files of one agent's sessions in step with committed events.

    ``enabled=False`` turns every method into a no-op (returning ``None``/``False``/``[]``).
    ``fsync`` applies to trace appends (off by default: SQLite is durable and the mirror is
    reconciled from it); compaction rewrites and reconciliation always fsync.
    ``snapshot_fsync`` applies to snapshot writes (a cache; off by default).
    """

    def __init__(
        self,
        memory_dir: str | Path,
        agent_id: str,
        *,
        enabled: bool = True,
        fsync: bool = False,
        snapshot_fsync: bool = False,
    ) -> None:
        self.agent_id = validate_agent_id(agent_id)
        self.agent_dir = Path(memory_dir) / "agents" / self.agent_id
        self.enabled = enabled
        self.fsync = fsync
        self.snapshot_fsync = snapshot_fsync
        self._models: dict[str, MirrorModel] = {}

    def session_dir(self, session_id: str) -> Path:
        return self.agent_dir / "sessions" / validate_session_id(session_id)

    def is_active(self, session_id: str) -> bool:
        return session_id in self._models

    def epoch_id(self, session_id: str) -> int | None:
        model = self._models.get(session_id)
        return None if model is None else model.epoch_id

    def activate(
        self, session_id: str, events: Sequence[SessionEvent], *, verify: bool = True
    ) -> list[str]:
        """Rebuild the session's state from all its events; with ``verify``, repair the files.

        Returns the files rewritten. An I/O error is logged and leaves the session
        inactive (appends return ``None`` until the next activation).
        """
        if not self.enabled:
            return []
        if not verify:
            self._models[session_id] = MirrorModel.from_events(events)
            return []
        return self.reconcile(session_id, events)

    def reconcile(self, session_id: str, events: Sequence[SessionEvent]) -> list[str]:
        """Rewrite the files that differ from a fresh rendering of ``events``; reset state."""
        if not self.enabled:
            return []
        self._models.pop(session_id, None)
        folder = self.session_dir(session_id)
        existed = folder.is_dir()
        try:
            changed, model = reconcile_session_dir(folder, events)
        except OSError as exc:
            logger.error("mirror of session %s could not be reconciled: %s", session_id, exc)
            return []
        if changed:
            # No folder before: a first writing (an imported or restored session), no repair.
            logger.log(
                logging.WARNING if existed else logging.INFO,
                "mirror of session %s %s: %s",
                session_id,
                "repaired" if existed else "written",
                ", ".join(changed),
            )
        self._models[session_id] = model
        return changed

    def forget(self, session_id: str) -> None:
        """Drop the session's in-memory state (on hibernation or session delete)."""
        self._models.pop(session_id, None)

    def delete_session(self, session_id: str) -> None:
        """Forget the session and remove its mirror folder."""
        self.forget(session_id)
        if self.enabled:
            shutil.rmtree(self.session_dir(session_id), ignore_errors=True)

    def append(self, session_id: str, events: Sequence[SessionEvent]) -> int | None:
        """Mirror committed ``events``; returns the highest seq mirrored, or ``None``.

        Events at or below the mirrored seq are skipped (a repeated call is harmless).
        """
        if not self.enabled:
            return None
        model = self._models.get(session_id)
        if model is None:
            if not events or min(e.seq for e in events) != 1:
                logger.warning("mirror: session %s not activated; append skipped", session_id)
                return None
            model = self._models[session_id] = MirrorModel()
        ops: list[MirrorOp] = []
        for event in events:
            if event.seq and event.seq <= model.last_seq:
                continue
            ops.extend(model.step(event))
        try:
            self._run(self.session_dir(session_id), ops)
        except OSError as exc:
            logger.error("mirror of session %s failed (%s); it will be reconciled", session_id, exc)
            self._models.pop(session_id, None)
            return None
        return model.last_seq

    def on_compaction(self, session_id: str, event: SessionEvent) -> int | None:
        """Mirror a committed compaction event (same as ``append([event])``)."""
        return self.append(session_id, [event])

    def write_snapshot(
        self,
        session_id: str,
        *,
        messages: Sequence[ContextMessage],
        system_instructions: Sequence[str] = (),
        last_seq: int,
    ) -> bool:
        """Write ``working_context_snapshot.json`` atomically; ``False`` when not written.

        ``epoch_id`` and ``last_compaction_ts`` come from the session's state (compaction
        events seen); ``last_seq`` is the session seq the messages reflect.
        """
        model = self._models.get(session_id) if self.enabled else None
        if model is None:
            return False
        payload = build_snapshot(
            agent_id=self.agent_id,
            messages=messages,
            system_instructions=system_instructions,
            epoch_id=model.epoch_id,
            last_compaction_ts=model.last_compaction_ts,
            last_seq=last_seq,
            session_id=session_id,
        )
        try:
            atomic_write_json(
                self.session_dir(session_id) / SNAPSHOT_FILE, payload, fsync=self.snapshot_fsync
            )
        except OSError as exc:
            logger.error("snapshot of session %s not written: %s", session_id, exc)
            return False
        return True

    def _run(self, session_dir: Path, ops: list[MirrorOp]) -> None:
        pending: list[bytes] = []
        for op in ops:
            if isinstance(op, AppendTraces):
                pending.append(encode_lines(op.lines))
                continue
            if pending:
                append_bytes(session_dir / ACTIVE_FILE, b"".join(pending), fsync=self.fsync)
                pending = []
            if isinstance(op, ArchiveTurns):
                _archive_turns(session_dir, op.turn_ids)
            elif isinstance(op, AppendItems):
                name = EPISODIC_FILE if op.kind == "episodic" else SEMANTIC_FILE
                append_bytes(session_dir / name, encode_lines(op.items), fsync=True)
        if pending:
            append_bytes(session_dir / ACTIVE_FILE, b"".join(pending), fsync=self.fsync)


def _turn_of_line(raw: bytes) -> object:
    try:
        value = _DECODER.decode(raw)
    except msgspec.DecodeError:
        return None
    return value.get("turn_id") if isinstance(value, dict) else None


def _archive_turns(session_dir: Path, turn_ids: frozenset[str]) -> None:
    """Move the active lines of ``turn_ids`` to the archive (archive first, then replace)."""
    active = session_dir / ACTIVE_FILE
    data = read_bytes_or_empty(active)
    keep: list[bytes] = []
    moved: list[bytes] = []
    for raw in data.split(b"\n"):
        if raw:
            turn_id = _turn_of_line(raw)
            hit = isinstance(turn_id, str) and turn_id in turn_ids
            (moved if hit else keep).append(raw + b"\n")
    if not moved:
        return
    append_bytes(session_dir / ARCHIVE_FILE, b"".join(moved), fsync=True)
    atomic_write_bytes(active, b"".join(keep), fsync=True)
