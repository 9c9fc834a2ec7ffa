"""The actor's link to its JSONL mirror: ordered, off the request path (I/O shell).

SQLite is the truth and answers are given once it committed; mirror file I/O (trace
lines, snapshot, compaction rewrites) runs afterwards on the registry's worker threads,
one operation at a time per agent and in commit order (a chain of tasks). A crash can
therefore leave the mirror behind SQLite, never ahead of it in a way that loses data,
and activation repairs it: the mirror cursor stored in SQLite (``sessions.mirror_seq``)
differs from ``last_seq`` after any crash, which makes activation verify the files.

Deleted stays deleted: a delete of events marks the mirror stale (``mirror_seq = -1``) and
unbinds the snapshot in its own transaction, so a crash before the repair below still
repairs on the next activation, which first removes any snapshot file SQLite does not
vouch for (``MirrorLink.activate_agent``, ``ensure_active``): neither a build nor the memory view ever reads the old
one. A summary planned from the events before the delete is refused at its commit
(``AgentCore.removal_conflict``). A session delete answers only once its folder is gone
(renamed out of ``sessions/`` in one step).

Activation is cheap: at a clean close each session's checkpoint (writer model, file sizes
and mtimes, the snapshot's seq and SHA-256) goes to SQLite; the next activation resumes
from it after a few ``stat`` calls (``mirror.checkpoint.plan_activation``) instead of
reading the history, and repairs, streamed from SQLite one file at a time
(``mirror_io.repair``), whatever does not match. It also removes the folders of sessions
that no longer exist. An activation runs in the write chain, after what was pending, in
commit order. A snapshot file is kept only when SQLite vouches for its bytes
(``snapshot_digest``, bound at a clean close, cleared by every delete in its own
transaction): a repair removes any other, and a resume (the files as a clean close left
them) removes one only when none is bound.

Writes are batched: committed events and end-of-turn snapshots are held for
``delay`` seconds (default 0.05) and then written together, trace lines in commit order
and only the latest snapshot of each session. On this machine any file write between
two commits made the next SQLite fsync flush it too (ext4 ordered mode): mirroring every
turn at once slowed turns about 2x, batching keeps it within the 25% budget. The mirror
is therefore at most ``delay`` behind SQLite while running; hibernation and shutdown
flush it, and a crash is repaired on activation.

The snapshot is a cache (served only when it matches SQLite's last seq, see above), and
rendering it costs a context build plus a file write: a session's snapshot is rendered at
most once per ``snapshot_interval`` (default 1 s). A turn that comes later than that after
the previous snapshot gets its own at the next flush; turns in quicker succession share
one, written at most ``snapshot_interval`` after the previous one, and ``drain``
(hibernation, shutdown) writes what is held at once. Under load (64 clients writing back
to back) this renders one snapshot per busy session per second instead of one per flush.

Where it renders: from the recent-events cache, on the loop at the flush, when the cache
holds the session's window (a client that builds its contexts keeps it warm); otherwise
the batch's worker thread reads the window from the file on a read-only connection of
its own (``read_snapshot``: ``snapshot_from_file``) and renders it there with the same
function. A client that only persists turns so costs the event loop nothing for the
snapshot: before, the loop read the window once per flush to warm the cache, which then
had to be kept up on every commit (measured: about 40 of 280 us of loop CPU per
sequential call at FULL). A read costs 0.5 ms alone and 3-4 ms of CPU under load (64
clients on 32 sessions), so a session whose snapshot was read is rendered again at most
once per ``cold_snapshot_interval`` (default 5 s); under that load the reads then cost
less than keeping the caches warm did. SQLite binds a snapshot only at a clean close, and
``drain`` renders the latest one then, so only a reader of the files sees the lag.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import shutil
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from ..concurrency.worker_threads import WorkerThreads
from ..core.agent_core import render_snapshot
from ..core.decisions import SnapshotParts
from ..mirror.checkpoint import Resume, plan_activation, repair_reason
from ..mirror.snapshot import SNAPSHOT_FILE, RestoredSnapshot
from ..mirror.snapshot_schedule import SnapshotSchedule
from ..mirror_io.snapshot_files import load_snapshot_cache
from ..mirror_io.snapshot_index import SnapshotIndex
from ..mirror_io.writer import MirrorWriter, validate_session_id
from ..storage.context_window import read_context_window_at
from ..storage.event_pages import SessionEventReader
from ..storage.mirror_columns import MirrorCheckpoint, MirrorRow, MirrorStatus
from ..storage.store import AgentStore
from ..values.errors import InvalidParamsError, SessionServerError
from ..values.events import SessionEvent
from ..values.plans import SnapshotDue
from ..values.recent import SessionView

__all__ = ["MirrorLink", "names_a_folder", "snapshot_from_file"]

log = logging.getLogger(__name__)
T = TypeVar("T")
# Renders a due snapshot (messages, system instructions, last seq) or says ``None``: the
# agent core's ``snapshot_parts``, a pure function of its state as of the latest commit
# (on the loop), or ``snapshot_from_file`` (on a worker thread).
SnapshotRenderer = Callable[[SnapshotDue], SnapshotParts | None]


class MirrorLink:
    """Schedules an agent's mirror writes in commit order.

    Callers (the actor) call the scheduling methods while holding the actor's write lock,
    right after the commit they mirror, so the chain order is the commit order.
    """

    def __init__(
        self,
        memory_dir: Path,
        agent_id: str,
        *,
        enabled: bool,
        executor: WorkerThreads,
        snapshot_parts: SnapshotRenderer,
        read_snapshot: SnapshotRenderer | None = None,
        delay: float = 0.05,
        snapshot_interval: float = 1.0,
        cold_snapshot_interval: float = 5.0,
        on_lag: Callable[[float], None] | None = None,
        index: SnapshotIndex | None = None,
    ) -> None:
        self.index = index if enabled else None
        on_touch = None if self.index is None else functools.partial(self.index.touch, agent_id)
        self.writer = MirrorWriter(memory_dir, agent_id, enabled=enabled, on_touch=on_touch)
        self._executor = executor
        self._render = snapshot_parts
        # Renders, on the batch's worker thread, a snapshot the cache could not.
        self._read_snapshot = read_snapshot
        self.delay = delay
        # Which snapshots wait, and each session's pace (monotonic times).
        self.schedule = SnapshotSchedule(snapshot_interval, cold_snapshot_interval)
        self._appends: dict[str, list[SessionEvent]] = {}
        self._timer: asyncio.Handle | None = None
        self._timer_at = 0.0  # the loop time the timer fires at
        self._chain: asyncio.Future[None] | None = None
        self._trash_tasks: set[asyncio.Future[None]] = set()  # deleting moved folders
        # Sessions activated (resumed or repaired) since the store opened.
        self._active: set[str] = set()
        # Mirror cursors confirmed by the files, not yet stored in sessions.mirror_seq.
        self._cursor: dict[str, int] = {}
        # The latest snapshot written per session: (seq it reflects, SHA-256 of its
        # bytes), bound in SQLite at close.
        self._bound: dict[str, tuple[int, str]] = {}
        # Bumped by every delete: a file write scheduled before it confirms nothing after.
        self._generation: dict[str, int] = {}
        # Mirror lag: when the oldest commit not yet handed to the chain was scheduled.
        self._on_lag = on_lag
        self._pending_since: float | None = None

    @property
    def snapshot_interval(self) -> float:
        return self.schedule.interval

    @snapshot_interval.setter
    def snapshot_interval(self, seconds: float) -> None:
        self.schedule.interval = seconds

    # -- activation, repair and checkpoints ------------------------------------------------

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

    @property
    def cold_snapshot_interval(self) -> float:
        return self.schedule.read_interval

    @cold_snapshot_interval.setter
    def cold_snapshot_interval(self, seconds: float) -> None:
        self.schedule.read_interval = seconds

    @property
    def busy(self) -> bool:
        """Mirror work to do now: trace lines not yet handed over, or a batch running.

        A snapshot held until its interval passes does not count: the actor may be
        hibernated meanwhile (``close`` drains, which renders it at once), instead of
        staying open above the host's bound for up to ``cold_snapshot_interval``."""
        return bool(self._appends) or (self._chain is not None and not self._chain.done())

    def _later(self, fn: Callable[[], T], then: Callable[[T], None] | None = None) -> None:
        prev = self._chain

        async def run() -> None:
            if prev is not None:
                await asyncio.wait([prev])
            try:
                result = await self._executor.run(fn)
            except Exception:
                # The writer logs its own I/O errors; anything else is a bug, but the
                # mirror is derived data: the next activation repairs it.
                log.exception("mirror operation failed for agent %r", self.writer.agent_id)
                return
            if then is not None:
                then(result)

        self._chain = asyncio.ensure_future(run())

    def run_later(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` on the mirror's worker after every mirror write scheduled before it
        (memory blocks' ``blocks.jsonl``: ``runtime.memory_blocks``)."""
        if self.enabled:
            self._later(fn)

    async def drain(self) -> None:
        """Write what is pending now (held snapshots too) and wait until every mirror
        operation finished."""
        self._flush(force=True)
        while self._chain is not None and not self._chain.done():
            await asyncio.wait([self._chain])

    def appended(self, session_id: str, events: Sequence[SessionEvent]) -> None:
        """Mirror committed ``events`` (scheduled)."""
        if not self.enabled:
            return
        self._appends.setdefault(session_id, []).extend(events)
        if self._pending_since is None:
            self._pending_since = time.monotonic()
        self._arm()

    def _arm(self, delay: float | None = None) -> None:
        """Flush in ``delay`` seconds (``self.delay`` by default), or sooner if already due."""
        loop = asyncio.get_running_loop()
        when = loop.time() + (self.delay if delay is None else delay)
        if self._timer is not None:
            if self._timer_at <= when:
                return
            self._timer.cancel()
        # The deadline is kept here: uvloop answers a time already past with a plain
        # Handle, which has no ``when()``.
        self._timer = loop.call_at(when, self._flush)
        self._timer_at = when

    def snapshot(self, due: SnapshotDue) -> None:
        """Write ``working_context_snapshot.json`` with the batch (a cache, never the truth).

        Its content is rendered (``snapshot_parts``) when the batch is written, from the
        state as of the latest commit; only the latest due snapshot of a session counts,
        and a session's is rendered at most once per ``snapshot_interval`` (once per
        ``cold_snapshot_interval`` when it had to be read from the file).
        """
        if not self.enabled:
            return
        self.schedule.want(due)
        self._arm()

    def _flush(self, *, force: bool = False) -> None:
        """Move what is pending into the chain: trace lines first, then the snapshots
        that are due (every one when ``force``d)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        appends, self._appends = self._appends, {}
        now = time.monotonic()
        dues, first_held = self.schedule.take(now, force)
        if first_held is not None:
            self._arm(max(first_held - now, 0.0))
        since, self._pending_since = self._pending_since, None
        # Rendered now, on the loop, from the core's state as of the latest commit, when
        # the cache holds the window; the others are read from the file with the batch.
        snapshots: dict[str, SnapshotParts] = {}
        cold: dict[str, SnapshotDue] = {}
        for sid, due in dues.items():
            parts = self._render(due)
            if parts is not None:
                snapshots[sid] = parts
            elif self._read_snapshot is not None:
                cold[sid] = due
        rendered_at = time.monotonic()
        for sid in snapshots:
            self.schedule.rendered(sid, rendered_at)
        for sid in cold:
            self.schedule.rendered(sid, rendered_at, read=True)
        if not appends and not snapshots and not cold:
            return

        generations = {sid: self._generation_of(sid) for sid in {*appends, *snapshots, *cold}}

        Written = tuple[dict[str, int | None], dict[str, tuple[int, str]], set[str]]

        def write() -> Written:
            cursors = {sid: self.writer.append(sid, evs) for sid, evs in appends.items()}
            failed: set[str] = set()
            for sid, due in cold.items():
                read, parts = self._read_cold(due)
                if not read:
                    failed.add(sid)
                elif parts is not None:  # None: the session is gone
                    snapshots[sid] = parts
            bound: dict[str, tuple[int, str]] = {}
            for sid, (msgs, system, last_seq) in snapshots.items():
                digest = self.writer.write_snapshot(
                    sid, messages=msgs, system_instructions=system, last_seq=last_seq
                )
                if digest is not None:
                    bound[sid] = (last_seq, digest)
            return cursors, bound, failed

        def done(result: Written) -> None:
            cursors, bound, failed = result
            # A delete since this batch was scheduled: what it wrote confirms nothing.
            current = {sid for sid, gen in generations.items() if self._generation_of(sid) == gen}
            for sid in failed & current:
                # Not read: held again (unless a newer one is), for the next drain or
                # once its interval has passed.
                self._arm(max(self.schedule.retry(cold[sid]) - time.monotonic(), 0.0))
            for sid, cursor in cursors.items():
                if sid not in current:
                    continue
                if cursor is None:
                    # Not mirrored (I/O error): re-activate, and so repair, on the next write.
                    self._active.discard(sid)
                else:
                    self._cursor[sid] = cursor
            for sid, binding in bound.items():
                if sid in current:
                    self._bound[sid] = binding
            if since is not None and self._on_lag is not None:
                self._on_lag(time.monotonic() - since)

        self._later(write, done)

    def _read_cold(self, due: SnapshotDue) -> tuple[bool, SnapshotParts | None]:
        """``(True, read_snapshot(due))`` on the batch's worker thread, or ``(False,
        None)`` when the file cannot be read or the render fails (no snapshot this time:
        it is held again, for the next drain or once its interval has passed). Never
        raises: the batch's trace lines and other snapshots are confirmed whatever happens
        to one read."""
        assert self._read_snapshot is not None
        try:
            return True, self._read_snapshot(due)
        except (SessionServerError, OSError, sqlite3.Error) as exc:
            log.warning(
                "snapshot of session %r of agent %r not rendered: %s",
                due.session_id,
                self.writer.agent_id,
                exc,
            )
        except Exception:
            # A bug, but the snapshot is derived data: the rest of the batch goes on.
            log.exception(
                "snapshot of session %r of agent %r not rendered",
                due.session_id,
                self.writer.agent_id,
            )
        return False, None

    async def unlist(self, session_ids: Sequence[str]) -> None:
        """Before a delete of sessions commits: the snapshot index stops listing them
        (a tombstone on disk, so not even a rebuild after a crash lists one again)."""
        await self._index_each(session_ids, forget=True)

    async def relist(self, session_ids: Sequence[str]) -> None:
        """The delete announced by ``unlist`` did not happen."""
        await self._index_each(session_ids, forget=False)

    async def _index_each(self, session_ids: Sequence[str], *, forget: bool) -> None:
        index = self.index
        ids = [sid for sid in session_ids if names_a_folder(sid)]
        if index is None or not ids:
            return
        agent_id = self.writer.agent_id

        def run() -> None:  # one hop to a worker thread for the whole batch
            if forget:
                index.forget_all(agent_id, ids)  # one durable transaction
                return
            for sid in ids:
                index.unforget(agent_id, sid)

        await self._executor.run(run)

    def _forget(self, session_id: str) -> None:
        """A delete committed: nothing pending or confirmed for the session counts now."""
        self._generation[session_id] = self._generation_of(session_id) + 1
        self.schedule.forget(session_id)
        self._appends.pop(session_id, None)
        self._cursor.pop(session_id, None)
        self._bound.pop(session_id, None)

    async def sessions_deleted(self, session_ids: Sequence[str]) -> None:
        """Remove the sessions' folders; returns once they are gone from ``sessions/``."""
        for sid in session_ids:
            self._forget(sid)
            self._active.discard(sid)
        # An id that cannot name a folder was never mirrored: nothing to remove.
        ids = [sid for sid in session_ids if names_a_folder(sid)]
        if not self.enabled or not ids:
            return
        writer = self.writer
        moved: list[Path] = []

        def remove() -> None:  # one job on the mirror's thread for the whole batch
            folder = writer.trash_sessions(ids)
            if folder is not None:
                moved.append(folder)

        self._later(remove)
        await self.drain()
        # Gone from ``sessions/``; their files are deleted on another worker thread,
        # not awaited (what a crash leaves in the trash goes at the next activation).
        for folder in moved:
            remove_all = functools.partial(shutil.rmtree, folder, ignore_errors=True)
            task = asyncio.ensure_future(self._executor.run(remove_all))
            self._trash_tasks.add(task)
            task.add_done_callback(self._trash_done)

    def _trash_done(self, task: asyncio.Future[None]) -> None:
        self._trash_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:  # the pool shut down
            log.warning("agent %r: trash not emptied (%s); the next activation does it",
                        self.writer.agent_id, task.exception())  # fmt: skip

    def events_deleted(self, store: AgentStore, session_id: str) -> None:
        """Rewrite the session's files from what is left in SQLite (scheduled, streamed).

        The delete's transaction marked the mirror stale and unbound the snapshot: if the
        process dies before this runs, the next activation repairs instead."""
        if not self.enabled:
            return
        self._forget(session_id)
        self._active.add(session_id)
        self._flush()
        path = store.path

        def repair() -> int | None:
            # The snapshot may hold deleted messages: remove it before anything else.
            (self.session_dir(session_id) / SNAPSHOT_FILE).unlink(missing_ok=True)
            return self._repair(path, session_id, after_edit=True)

        self._later(repair, self._confirm(session_id))

    def snapshot_cache(
        self, session_id: str, last_seq: int, digest: str
    ) -> RestoredSnapshot | None:
        """The session's snapshot when its bytes have ``digest`` (as SQLite recorded), it
        is valid and current (its last_seq), else ``None``."""
        if not self.enabled:
            return None
        return load_snapshot_cache(self.session_dir(session_id), last_seq=last_seq, digest=digest)

    async def close(self, store: AgentStore | None) -> None:
        """Drain the chain, store each active session's checkpoint (cursor, model, file
        stamps, snapshot binding) in one transaction, forget in-memory state."""
        await self.drain()
        if store is not None and self._active:
            checkpoints = await self._executor.run(
                self._checkpoints,
                sorted(self._active),
                dict(self._cursor),
                dict(self._bound),
            )
            try:
                await store.save_mirror_checkpoints(checkpoints)
            except SessionServerError as exc:
                # Not fatal: without a checkpoint the next activation repairs.
                log.warning("mirror checkpoints of agent %r not stored: %s", store.agent_id, exc)
        for session_id in self._active:
            self.writer.forget(session_id)
        self._active.clear()
        self._cursor.clear()
        self._bound.clear()
        # A snapshot held again after a failed read during the drain: not for this store.
        self.schedule.drop_waiting()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def stats(self) -> dict[str, Any]:
        return {"active_sessions": len(self._active), "busy": self.busy}


def snapshot_from_file(
    path: Path, limit: int, busy_timeout_ms: int, due: SnapshotDue
) -> SnapshotParts | None:
    """The snapshot ``due`` asks for, from the agent file at ``path`` (the window of
    ``limit`` events, read on a read-only connection of its own, rendered as the cache
    would: ``render_snapshot``); ``None`` when the session is gone. A worker thread."""
    window = read_context_window_at(path, due.session_id, limit, busy_timeout_ms=busy_timeout_ms)
    return None if window is None else render_snapshot(SessionView.of(window), due.instructions)


def names_a_folder(session_id: str) -> bool:
    """Whether ``session_id`` can name a folder (a session whose id cannot was never
    mirrored)."""
    try:
        validate_session_id(session_id)
    except InvalidParamsError:
        return False
    return True
