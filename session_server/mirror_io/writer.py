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
2. The first time a session is touched in a process, activate it: ``resume(session_id,
   model)`` with the model of the checkpoint SQLite kept at the last clean close (when
   ``mirror.checkpoint.plan_activation`` says the files are as recorded), else
   ``repair(session_id, source)``, which rewrites the files streamed from SQLite
   (``mirror_io.repair``). ``activate(session_id, events, verify=...)`` does the same from
   events in memory. A brand-new session (first event seq 1) needs no activation. After
   a delete of events, call ``repair``.
3. At the end of a turn and after a compaction, call ``write_snapshot``; it returns the
   SHA-256 of the bytes written, which SQLite keeps so the file is served only as written.
4. At a clean close, store ``checkpoint(session_id)`` in SQLite.

Hot path cost: ``append`` maps events to lines in memory and does one append-mode write;
it never reads a file. A summarize compaction reads and rewrites the active file once.
Crash safety: lines moved by a compaction are appended to the archive (fsync) before the
active file is atomically replaced, so a kill in between duplicates lines, never loses
them; a repair then rewrites every file that differs from a fresh rendering of the events.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any, Final

import msgspec

from ..mirror.checkpoint import FileStamps, encode_stamps, model_checkpoint, orphan_folders
from ..mirror.model import (
    AppendItems,
    AppendTraces,
    ArchiveTurns,
    MirrorGap,
    MirrorModel,
    MirrorOp,
)
from ..mirror.snapshot import SNAPSHOT_FILE, build_snapshot
from ..values.agent_ids import validate_agent_id, validate_new_id
from ..values.errors import InvalidParamsError
from ..values.events import ContextMessage, SessionEvent
from .jsonl import (
    append_bytes,
    atomic_write_bytes,
    encode_lines,
    read_bytes_or_empty,
)
from .repair import (
    ACTIVE_FILE,
    ARCHIVE_FILE,
    EPISODIC_FILE,
    SEMANTIC_FILE,
    EventSource,
    ListSource,
    file_stamps,
    move_to_trash,
    repair_session_files,
    sweep_orphans,
)
from .snapshot_files import drop_unbound_snapshot, snapshot_digest

__all__ = [
    "MirrorWriter",
    "reconcile_session_dir",
    "validate_new_session_id",
    "validate_session_id",
]

logger = logging.getLogger("session_server.mirror")

_ENCODER: Final = msgspec.json.Encoder()
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


def validate_new_session_id(session_id: object) -> str:
    """``validate_session_id`` for a session being created: also ``validate_new_id``."""
    return validate_new_id(validate_session_id(session_id), "session_id")


def reconcile_session_dir(
    session_dir: Path, events: Sequence[SessionEvent], *, fsync: bool = True
) -> tuple[list[str], MirrorModel]:
    """Make the four JSONL files equal a fresh rendering of ``events`` (in memory; see
    ``repair.repair_session_files``). Returns the files changed and the rebuilt state."""
    return repair_session_files(session_dir, ListSource(events), fsync=fsync)


class MirrorWriter:
    """Keeps the mirror files of one agent's sessions in step with committed events.

    ``enabled=False`` turns every method into a no-op (returning ``None``/``False``/``[]``).
    ``fsync`` applies to trace appends (off by default: SQLite is durable and the mirror is
    reconciled from it); compaction rewrites and reconciliation always fsync.
    ``snapshot_fsync`` applies to snapshot writes (a cache; off by default).
    ``on_touch(session_id)`` runs after every write into (or removal of) a session folder,
    on the writing thread (the snapshot index re-reads that folder's summary later).
    """

    def __init__(
        self,
        memory_dir: str | Path,
        agent_id: str,
        *,
        enabled: bool = True,
        fsync: bool = False,
        snapshot_fsync: bool = False,
        on_touch: Callable[[str], None] | None = None,
    ) -> None:
        self.agent_id = validate_agent_id(agent_id)
        self._on_touch = on_touch
        self.agent_dir = Path(memory_dir) / "agents" / self.agent_id
        self.enabled = enabled
        self.fsync = fsync
        self.snapshot_fsync = snapshot_fsync
        self._models: dict[str, MirrorModel] = {}

    def _touched(self, session_id: str) -> None:
        if self._on_touch is not None:
            self._on_touch(session_id)

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
        return self.repair(session_id, ListSource(events)) or []

    def repair(
        self, session_id: str, source: EventSource, *, after_edit: bool = False
    ) -> list[str] | None:
        """Rewrite the files that differ from the rendering of ``source`` (streamed, one
        file at a time) and go on from there; ``None`` on an I/O error (logged; the
        session stays inactive). ``after_edit``: the rewrite that follows a delete, pop
        or clear, expected, so logged at debug level; otherwise files that differ are a
        repair (a crash or an outside change), logged as a warning."""
        if not self.enabled:
            return []
        self._models.pop(session_id, None)
        folder = self.session_dir(session_id)
        existed = folder.is_dir()
        try:
            changed, model = repair_session_files(folder, source)
        except OSError as exc:
            logger.error("mirror of session %s could not be repaired: %s", session_id, exc)
            return None
        finally:
            self._touched(session_id)
        if changed:
            # No folder before: a first writing (an imported or restored session), no repair.
            logger.log(
                logging.DEBUG if after_edit else logging.WARNING if existed else logging.INFO,
                "mirror of session %s %s: %s",
                session_id,
                "rewritten after an edit" if after_edit else "repaired" if existed else "written",
                ", ".join(changed),
            )
        self._models[session_id] = model
        return changed

    def resume(self, session_id: str, model: MirrorModel) -> None:
        """Go on from a checkpointed model (the files are as it was taken)."""
        if self.enabled:
            self._models[session_id] = model

    def drop_unbound_snapshot(self, session_id: str, digest: str | None) -> bool:
        """Remove the session's snapshot file unless its bytes have ``digest`` (the one
        SQLite vouches for, ``None`` for none; ``snapshot_files.drop_unbound_snapshot``);
        whether one was removed. An I/O error is logged and raised (the activation that
        asked fails, and the session's mirror is not confirmed)."""
        if not self.enabled:
            return False
        try:
            removed = drop_unbound_snapshot(self.session_dir(session_id), digest)
        except OSError as exc:
            logger.error("snapshot of session %s could not be removed: %s", session_id, exc)
            raise
        if removed:
            self._touched(session_id)
            logger.info("snapshot of session %s removed: SQLite does not vouch for it", session_id)
        return removed

    def stamps(self, session_id: str) -> FileStamps:
        """The stamps (``file_stamps``) of the session's mirror files (those that exist)."""
        return file_stamps(self.session_dir(session_id))

    def checkpoint(self, session_id: str) -> tuple[int, str, str] | None:
        """(last seq, model JSON, file stamps JSON) of an active session, for SQLite."""
        model = self._models.get(session_id) if self.enabled else None
        if model is None:
            return None
        try:
            stamps = self.stamps(session_id)
        except OSError as exc:
            logger.warning("mirror of session %s: no checkpoint (%s)", session_id, exc)
            return None
        return model.last_seq, model_checkpoint(model), encode_stamps(stamps)

    def sweep_orphans(self, session_ids: Collection[str]) -> list[str]:
        """Remove mirror folders of sessions that no longer exist (and ``.trash``)."""
        if not self.enabled:
            return []
        removed = sweep_orphans(self.agent_dir, lambda names: orphan_folders(names, session_ids))
        for name in removed:
            self._touched(name)  # the snapshot index drops them
        if removed:
            logger.warning(
                "agent %r: removed mirror folders of deleted sessions: %s",
                self.agent_id,
                ", ".join(removed),
            )
        return removed

    def forget(self, session_id: str) -> None:
        """Drop the session's in-memory state (on hibernation or session delete)."""
        self._models.pop(session_id, None)

    def delete_session(self, session_id: str) -> None:
        """Forget the session and remove its mirror folder (gone from ``sessions/`` in one
        rename, then deleted)."""
        self.delete_sessions([session_id])

    def delete_sessions(self, session_ids: Sequence[str]) -> None:
        """``delete_session`` of each of ``session_ids``, the folder renames synced once."""
        moved = self.trash_sessions(session_ids)
        if moved is not None:
            shutil.rmtree(moved, ignore_errors=True)

    def trash_sessions(self, session_ids: Sequence[str]) -> Path | None:
        """Forget the sessions and move their folders out of ``sessions/`` into one
        folder of the trash, returned for the caller to delete (``move_to_trash``)."""
        for sid in session_ids:
            self.forget(sid)
        if not self.enabled:
            return None
        moved = move_to_trash(self.agent_dir, [self.session_dir(s) for s in session_ids])
        for sid in session_ids:
            self._touched(sid)
        return moved

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
        try:
            for event in events:
                if event.seq and event.seq <= model.last_seq:
                    continue
                ops.extend(model.step(event))
        except MirrorGap as gap:
            logger.warning("mirror of session %s needs a repair (%s)", session_id, gap)
            self._models.pop(session_id, None)
            return None
        try:
            self._run(self.session_dir(session_id), ops)
        except OSError as exc:
            logger.error("mirror of session %s failed (%s); it will be reconciled", session_id, exc)
            self._models.pop(session_id, None)
            return None
        finally:
            if ops:
                self._touched(session_id)
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
    ) -> str | None:
        """Write ``working_context_snapshot.json`` atomically; the SHA-256 of the bytes
        written, or ``None`` when not written.

        ``epoch_id`` and ``last_compaction_ts`` come from the session's state (compaction
        events seen); ``last_seq`` is the session seq the messages reflect.
        """
        model = self._models.get(session_id) if self.enabled else None
        if model is None:
            return None
        payload = build_snapshot(
            agent_id=self.agent_id,
            messages=messages,
            system_instructions=system_instructions,
            epoch_id=model.epoch_id,
            last_compaction_ts=model.last_compaction_ts,
            last_seq=last_seq,
            session_id=session_id,
        )
        data = _ENCODER.encode(payload)
        try:
            atomic_write_bytes(
                self.session_dir(session_id) / SNAPSHOT_FILE, data, fsync=self.snapshot_fsync
            )
        except OSError as exc:
            logger.error("snapshot of session %s not written: %s", session_id, exc)
            return None
        self._touched(session_id)
        return snapshot_digest(data)

    def _run(self, session_dir: Path, ops: list[MirrorOp]) -> None:
        # Consecutive trace lines go out in one write of one encoding.
        pending: list[dict[str, Any]] = []
        for op in ops:
            if isinstance(op, AppendTraces):
                pending.extend(op.lines)
                continue
            if pending:
                append_bytes(session_dir / ACTIVE_FILE, encode_lines(pending), fsync=self.fsync)
                pending = []
            if isinstance(op, ArchiveTurns):
                _archive_turns(session_dir, op.turn_ids)
            elif isinstance(op, AppendItems):
                name = EPISODIC_FILE if op.kind == "episodic" else SEMANTIC_FILE
                append_bytes(session_dir / name, encode_lines(op.items), fsync=True)
        if pending:
            append_bytes(session_dir / ACTIVE_FILE, encode_lines(pending), fsync=self.fsync)


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
