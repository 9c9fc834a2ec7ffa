"""Activation and checkpoints of an agent's JSONL mirror (I/O shell): a part of ``MirrorLink``.

Activation is cheap: at a clean close each session's checkpoint (writer model, file sizes
and mtimes, the snapshot's seq and SHA-256) goes to SQLite; the next activation resumes
from it after a few ``stat`` calls (``mirror.checkpoint.plan_activation``) instead of
reading the history, and repairs, streamed from SQLite one file at a time
(``mirror_io.repair``), whatever does not match. It also removes the folders of sessions
that no longer exist.

A snapshot file is kept only when SQLite vouches for its bytes (``snapshot_digest``, bound
at a clean close, cleared by every delete in its own transaction): a repair removes any
other before the memory view (which reads the files as they are) can see it, so a crash
right after a delete's answer never brings the deleted messages back; a resume (the files
as a clean close left them) removes one only when none is bound.

``MirrorActivation`` is the base of ``MirrorLink``, which owns the state both share (the
sessions activated, their confirmed cursors and snapshot bindings, the delete
generations) and gives the write chain (``_later``) and the flush of pending writes
(``_flush``): an activation runs in the chain, after what was pending, in commit order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from ..concurrency.worker_threads import WorkerThreads
from ..mirror.checkpoint import Resume, plan_activation, repair_reason
from ..mirror_io.writer import MirrorWriter, validate_session_id
from ..storage.event_pages import SessionEventReader
from ..storage.mirror_columns import MirrorCheckpoint, MirrorRow, MirrorStatus
from ..storage.store import AgentStore
from ..values.errors import InvalidParamsError

__all__ = ["MirrorActivation", "names_a_folder"]

# The records were ``mirror_link``'s before activation had a module of its own.
log = logging.getLogger("session_server.runtime.mirror_link")


class MirrorActivation:
    """Activation, repair and checkpoints of an agent's mirrored sessions (see the
    module's doc); the base of ``MirrorLink``, which sets the state below."""

    writer: MirrorWriter
    _executor: WorkerThreads
    # Sessions activated (resumed or repaired) since the store opened.
    _active: set[str]
    # Mirror cursors confirmed by the files, not yet stored in sessions.mirror_seq.
    _cursor: dict[str, int]
    # The latest snapshot written per session: (seq it reflects, SHA-256 of its bytes),
    # bound in SQLite at close.
    _bound: dict[str, tuple[int, str]]
    # Bumped by every delete: a file write scheduled before it confirms nothing after.
    _generation: dict[str, int]
    # Given by ``MirrorLink``: ``_later(fn, then)`` runs ``fn`` on a worker thread after
    # every operation scheduled before it (then ``then(result)`` on the loop);
    # ``_flush()`` moves what is pending into that chain first.
    _later: Callable[..., None]
    _flush: Callable[..., None]

    @property
    def enabled(self) -> bool:
        return self.writer.enabled

    def session_dir(self, session_id: str) -> Path:
        return self.writer.session_dir(session_id)

    def cursor(self, session_id: str) -> int | None:
        """The last mirrored seq confirmed since the last store of the cursor."""
        return self._cursor.get(session_id)

    def _generation_of(self, session_id: str) -> int:
        return self._generation.get(session_id, 0)

    async def activate_agent(self, store: AgentStore) -> None:
        """On opening the store: remove orphan folders, then repair (scheduled) every
        session whose files are not as its checkpoint says; the others resume lazily."""
        if not self.enabled or store.readonly:
            return
        rows = await store.mirror_statuses()
        ids = {row.session_id for row in rows}
        if not store.created:
            # Before anything else touches the files: nothing is scheduled for this agent
            # yet. (A new file never had a session: folders beside it are not ours.)
            await self._executor.run(self.writer.sweep_orphans, ids)
        stale = await self._executor.run(self._stale, rows)
        for session_id in stale:
            await self.ensure_active(store, session_id)

    def _stale(self, rows: Sequence[MirrorStatus]) -> list[str]:
        """Sessions whose files need a repair (a few ``stat`` calls each; a worker thread)."""
        out = []
        for row in rows:
            if not row.last_seq or not names_a_folder(row.session_id):
                continue  # never written: nothing to repair
            reason = repair_reason(
                last_seq=row.last_seq,
                mirror_seq=row.mirror_seq,
                has_checkpoint=row.has_checkpoint,
                files=row.mirror_files,
                observed=self.writer.stamps(row.session_id),
            )
            if reason is not None:
                out.append(row.session_id)
        return out

    def needs_activation(self, session_id: str) -> bool:
        """Whether ``ensure_active`` has anything to do for ``session_id``."""
        return self.enabled and session_id not in self._active

    async def ensure_active(self, store: AgentStore, session_id: str) -> None:
        """Schedule the session's activation: resume from its checkpoint when the files
        match it, else a streamed repair from SQLite."""
        if not self.needs_activation(session_id):
            return
        row = await store.mirror_row(session_id)
        if row is None:
            return  # the append fails with NotFoundError
        self._active.add(session_id)
        self._flush()
        self._schedule_activation(store, row)

    def _schedule_activation(self, store: AgentStore, row: MirrorRow) -> None:
        session_id, path = row.session_id, store.path

        def activate() -> int | None:
            decision = plan_activation(
                last_seq=row.last_seq,
                mirror_seq=row.mirror_seq,
                state=row.mirror_state,
                files=row.mirror_files,
                observed=self.writer.stamps(session_id),
            )
            if isinstance(decision, Resume):
                # The files are as a clean close left them: a snapshot bound then is kept
                # without reading it (only one SQLite does not vouch for goes).
                if row.snapshot_digest is None:
                    self.writer.drop_unbound_snapshot(session_id, None)
                self.writer.resume(session_id, decision.model)
                return row.last_seq
            if row.last_seq or self.session_dir(session_id).is_dir():
                log.info("mirror of session %s: repair (%s)", session_id, decision.reason)
            # Before the memory view can read it: a snapshot SQLite does not vouch for may
            # hold messages a delete removed (the delete answered, then the process died
            # before its own repair removed the file).
            self.writer.drop_unbound_snapshot(session_id, row.snapshot_digest)
            return self._repair(path, session_id)

        self._later(activate, self._confirm(session_id))

    def _repair(self, path: Path, session_id: str, *, after_edit: bool = False) -> int | None:
        """Repair the session's files streamed from SQLite (a worker thread); the session's
        last seq in the state the repair read, or ``None`` when it failed. ``after_edit``:
        the expected rewrite after a delete, pop or clear (``MirrorWriter.repair``)."""
        with SessionEventReader(path, session_id) as source:
            if self.writer.repair(session_id, source, after_edit=after_edit) is None:
                return None
            return source.last_seq()

    def _confirm(self, session_id: str) -> Callable[[int | None], None]:
        """After an activation or repair: its cursor, unless a delete came since."""
        generation = self._generation_of(session_id)

        def done(last_seq: int | None) -> None:
            if last_seq is not None and self._generation_of(session_id) == generation:
                self._activated(session_id, last_seq)

        return done

    def _activated(self, session_id: str, last_seq: int) -> None:
        # The writer drops a session's state on an I/O error: then nothing is confirmed.
        if self.writer.is_active(session_id):
            self._cursor[session_id] = last_seq

    def _checkpoints(
        self, active: list[str], cursors: dict[str, int], bound: dict[str, tuple[int, str]]
    ) -> list[MirrorCheckpoint]:
        """What SQLite keeps of each active, confirmed session (a worker thread)."""
        out = []
        for session_id in active:
            cursor = cursors.get(session_id)
            taken = self.writer.checkpoint(session_id)
            if cursor is None or taken is None:
                continue  # not confirmed: the stored cursor stays behind, activation repairs
            model_seq, state, files = taken
            if model_seq > cursor:
                continue
            out.append(MirrorCheckpoint(session_id, cursor, state, files, bound.get(session_id)))
        return out


def names_a_folder(session_id: str) -> bool:
    """Whether ``session_id`` can name a folder (a session whose id cannot was never
    mirrored)."""
    try:
        validate_session_id(session_id)
    except InvalidParamsError:
        return False
    return True
