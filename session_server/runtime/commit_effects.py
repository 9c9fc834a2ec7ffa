"""``GroupCommit``: one group of appends in one transaction, then each one's effects (I/O shell).

Each append stays atomic in its own savepoint (``store.append_group``), so a refused one
(conflict, unknown session, an id that exists, an idempotency replay) fails or replays
alone; they run in queue order, and each caller is answered only after the group's
commit. The effects the core returns for a commit (mirror lines, subscribers, the
working-context snapshot) run in commit order while the write lock is held.
"""

from __future__ import annotations

from ..core.agent_core import AgentCore
from ..core.errors import SessionServerError
from ..core.plans import Effects
from ..storage.store import AgentStore
from .mirror_link import MirrorLink
from .subscriptions import Subscriptions
from .write_queue import AppendJob

__all__ = ["GroupCommit"]


class GroupCommit:
    """Commits the append groups of an actor's ``WriteQueue`` and runs their effects."""

    def __init__(self, core: AgentCore, mirror: MirrorLink, subscriptions: Subscriptions) -> None:
        self.core = core
        self.mirror = mirror
        self.subscriptions = subscriptions

    async def commit_group(self, store: AgentStore, jobs: list[AppendJob]) -> None:
        """One transaction for ``jobs`` (under the write lock), then each one's effects
        and answer, in order."""
        for sid in dict.fromkeys(job.plan.batch.session_id for job in jobs):
            try:
                await self.mirror.ensure_active(store, sid)
            except Exception as exc:  # this session's appends fail; the others go on
                for job in jobs:
                    if job.plan.batch.session_id == sid:
                        job.future.set_exception(exc)
        live = [job for job in jobs if not job.future.done()]
        if not live:
            return
        batches = []
        for job in live:
            batch = job.plan.batch
            cursor = self.mirror.cursor(batch.session_id)
            batches.append(batch if cursor is None else batch.with_mirror_seq(cursor))
        outcomes = await store.append_group(batches)
        for job, outcome in zip(live, outcomes, strict=True):
            if isinstance(outcome, SessionServerError):
                job.future.set_exception(outcome)
                continue
            try:
                effects = self.core.committed(job.plan, outcome)
                if effects is not None:
                    self.run(effects)
            except Exception as exc:  # committed, but its effects failed: say so
                job.future.set_exception(exc)
            else:
                job.future.set_result(outcome.result)

    def run(self, effects: Effects) -> None:
        """Effects of a commit, in commit order (the write lock is held)."""
        sid = effects.session_id
        if effects.mirror:
            self.mirror.appended(sid, effects.mirror)
        if effects.notify:
            self.subscriptions.publish(sid, effects.notify)
        if effects.snapshot is not None:
            self.mirror.snapshot(effects.snapshot)
