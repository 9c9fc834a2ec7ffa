"""The actor's link to its JSONL mirror: ordered, off the request path (I/O shell).

SQLite is the truth and answers are given once it committed; mirror file I/O (trace
lines, snapshot, compaction rewrites) runs afterwards on the registry's worker threads,
one operation at a time per agent and in commit order (a chain of tasks). A crash can
therefore leave the mirror behind SQLite, never ahead of it in a way that loses data,
and activation repairs it: the mirror cursor stored in SQLite (``sessions.mirror_seq``)
differs from ``last_seq`` after any crash, which makes activation verify the files.

Writes are batched: committed events and end-of-turn snapshots are held for
``delay`` seconds (default 0.05) and then written together, trace lines in commit order
and only the latest snapshot of each session. On this machine any file write between
two commits made the next SQLite fsync flush it too (ext4 ordered mode): mirroring every
turn at once slowed turns about 2x, batching keeps it within the 25% budget. The mirror
is therefore at most ``delay`` behind SQLite while running; hibernation and shutdown
flush it, and a crash is repaired on activation.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Any, TypeVar

from ..core.errors import InvalidParamsError, SessionServerError
from ..core.events import ContextMessage, SessionEvent
from ..core.plans import SnapshotDue
from ..mirror.snapshot import SNAPSHOT_FILE, RestoredSnapshot
from ..mirror_io.snapshot_files import load_snapshot_cache
from ..mirror_io.writer import MirrorWriter, validate_session_id
from ..storage.store import AgentStore

__all__ = ["MirrorLink"]

log = logging.getLogger(__name__)
T = TypeVar("T")
# Renders a due snapshot (messages, system instructions, last seq) or says ``None``: the
# agent core's ``snapshot_parts``, a pure function of its state as of the latest commit.
SnapshotRenderer = Callable[[SnapshotDue], tuple[list[ContextMessage], list[str], int] | None]


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
        executor: Executor,
        snapshot_parts: SnapshotRenderer,
        delay: float = 0.05,
        on_lag: Callable[[float], None] | None = None,
    ) -> None:
        self.writer = MirrorWriter(memory_dir, agent_id, enabled=enabled)
        self._executor = executor
        self._render = snapshot_parts
        self.delay = delay
        self._appends: dict[str, list[SessionEvent]] = {}
        self._snapshots: dict[str, SnapshotDue] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._chain: asyncio.Future[None] | None = None
        self._active: set[str] = set()
        # Mirror cursors confirmed by the files, not yet stored in sessions.mirror_seq.
        self._cursor: dict[str, int] = {}
        # Mirror lag: when the oldest commit not yet handed to the chain was scheduled.
        self._on_lag = on_lag
        self._pending_since: float | None = None

    @property
    def enabled(self) -> bool:
        return self.writer.enabled

    def session_dir(self, session_id: str) -> Path:
        return self.writer.session_dir(session_id)

    @property
    def busy(self) -> bool:
        pending = bool(self._appends or self._snapshots)
        return pending or (self._chain is not None and not self._chain.done())

    def cursor(self, session_id: str) -> int | None:
        """The last mirrored seq confirmed since the last store of the cursor."""
        return self._cursor.get(session_id)

    def _later(self, fn: Callable[[], T], then: Callable[[T], None] | None = None) -> None:
        prev = self._chain
        loop = asyncio.get_running_loop()

        async def run() -> None:
            if prev is not None:
                await asyncio.wait([prev])
            try:
                result = await loop.run_in_executor(self._executor, fn)
            except Exception:
                # The writer logs its own I/O errors; anything else is a bug, but the
                # mirror is derived data: the next activation repairs it.
                log.exception("mirror operation failed for agent %r", self.writer.agent_id)
                return
            if then is not None:
                then(result)

        self._chain = asyncio.ensure_future(run())

    async def drain(self) -> None:
        """Write what is pending now and wait until every mirror operation finished."""
        self._flush()
        while self._chain is not None and not self._chain.done():
            await asyncio.wait([self._chain])

    async def ensure_active(self, store: AgentStore, session_id: str) -> None:
        """Schedule the session's activation (with repair when its cursor is stale)."""
        if not self.enabled or session_id in self._active:
            return
        state = await store.session_state(session_id)
        if state is None:
            return  # the append fails with NotFoundError
        verify = state.mirror_seq != state.last_seq
        events = await store.all_events(session_id) if state.last_seq else []
        self._active.add(session_id)
        self._flush()
        last_seq = state.last_seq
        self._later(
            lambda: self.writer.activate(session_id, events, verify=verify),
            lambda _changed: self._activated(session_id, last_seq),
        )

    def _activated(self, session_id: str, last_seq: int) -> None:
        # The writer drops a session's state on an I/O error: then nothing is confirmed.
        if self.writer.is_active(session_id):
            self._cursor[session_id] = last_seq

    def appended(self, session_id: str, events: Sequence[SessionEvent]) -> None:
        """Mirror committed ``events`` (scheduled)."""
        if not self.enabled:
            return
        self._appends.setdefault(session_id, []).extend(events)
        if self._pending_since is None:
            self._pending_since = time.monotonic()
        self._arm()

    def _arm(self) -> None:
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.delay, self._flush)

    def snapshot(self, due: SnapshotDue) -> None:
        """Write ``working_context_snapshot.json`` with the batch (a cache, never the truth).

        Its content is rendered (``snapshot_parts``) when the batch is written, from the
        state as of the latest commit; only the latest due snapshot of a session counts.
        """
        if not self.enabled:
            return
        self._snapshots[due.session_id] = due
        self._arm()

    def _flush(self) -> None:
        """Move what is pending into the chain: trace lines first, then snapshots."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        appends, self._appends = self._appends, {}
        dues, self._snapshots = self._snapshots, {}
        since, self._pending_since = self._pending_since, None
        # Rendered now, on the loop, from the core's state as of the latest commit.
        snapshots = {sid: parts for sid, due in dues.items() if (parts := self._render(due))}
        if not appends and not snapshots:
            return

        def write() -> dict[str, int | None]:
            cursors = {sid: self.writer.append(sid, evs) for sid, evs in appends.items()}
            for sid, (msgs, system, last_seq) in snapshots.items():
                self.writer.write_snapshot(
                    sid, messages=msgs, system_instructions=system, last_seq=last_seq
                )
            return cursors

        def done(cursors: dict[str, int | None]) -> None:
            for sid, cursor in cursors.items():
                if cursor is None:
                    # Not mirrored (I/O error): re-activate, and so repair, on the next write.
                    self._active.discard(sid)
                else:
                    self._cursor[sid] = cursor
            if since is not None and self._on_lag is not None:
                self._on_lag(time.monotonic() - since)

        self._later(write, done)

    def session_deleted(self, session_id: str) -> None:
        self._snapshots.pop(session_id, None)
        self._appends.pop(session_id, None)
        self._active.discard(session_id)
        self._cursor.pop(session_id, None)
        if self.enabled and _names_a_folder(session_id):
            # An id that cannot name a folder was never mirrored: nothing to remove.
            self._later(lambda: self.writer.delete_session(session_id))

    async def events_deleted(self, store: AgentStore, session_id: str) -> None:
        """Rewrite the session's files from what is left in SQLite (scheduled)."""
        if not self.enabled:
            return
        events = await store.all_events(session_id)
        self._cursor.pop(session_id, None)
        self._active.add(session_id)
        self._flush()
        last_seq = max((e.seq for e in events), default=0)

        def repair() -> None:
            self.writer.reconcile(session_id, events)
            # The snapshot may hold deleted messages and still look current: drop it.
            (self.session_dir(session_id) / SNAPSHOT_FILE).unlink(missing_ok=True)

        self._later(repair, lambda _none: self._activated(session_id, last_seq))

    def snapshot_cache(self, session_id: str, last_seq: int) -> RestoredSnapshot | None:
        """The session's snapshot when valid and current (its last_seq), else ``None``."""
        if not self.enabled:
            return None
        return load_snapshot_cache(self.session_dir(session_id), last_seq=last_seq)

    async def close(self, store: AgentStore | None) -> None:
        """Drain the chain, store the confirmed cursors, forget in-memory state."""
        await self.drain()
        if store is not None:
            for session_id, cursor in list(self._cursor.items()):
                try:
                    await store.set_mirror_seq(session_id, cursor)
                except SessionServerError as exc:
                    # Not fatal: a stale cursor only makes the next activation verify.
                    log.warning("mirror cursor of %r not stored: %s", session_id, exc)
        for session_id in self._active:
            self.writer.forget(session_id)
        self._active.clear()
        self._cursor.clear()

    def stats(self) -> dict[str, Any]:
        return {"active_sessions": len(self._active), "busy": self.busy}


def _names_a_folder(session_id: str) -> bool:
    try:
        validate_session_id(session_id)
    except InvalidParamsError:
        return False
    return True
