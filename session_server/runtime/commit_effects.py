"""``GroupCommit``: one group of appends in one transaction, then each one's effects (I/O shell).

Each append stays atomic in its own savepoint (``store.append_group``), so a refused one
(conflict, unknown session, an id that exists, an idempotency replay) fails or replays
alone; they run in queue order, and each caller is answered only after the group's
commit. The effects the core returns for a commit (mirror lines, subscribers, the
working-context snapshot) run in commit order while the write lock is held.
"""

from __future__ import annotations

from collections.abc import Callable

from ..core.agent_core import AgentCore
from ..storage.store import AgentStore
from ..values.errors import SessionServerError
from ..values.plans import AppendOutcome, Effects
from ..values.usage import UsageTotals
from .mirror_link import MirrorLink
from .subscriptions import Subscriptions
from .write_queue import AppendJob

__all__ = ["GroupCommit"]


class GroupCommit:
    """Commits the append groups of an actor's ``WriteQueue`` and runs their effects."""

    def __init__(
        self,
        core: AgentCore,
        mirror: MirrorLink,
        subscriptions: Subscriptions,
        on_usage: Callable[[UsageTotals], None] | None = None,
    ) -> None:
        self.core = core
        self.mirror = mirror
        self.subscriptions = subscriptions
        # Told each committed batch's usage (the metrics): not a replay's, which wrote
        # nothing.
        self.on_usage = on_usage

    async def commit_group(self, store: AgentStore, jobs: list[AppendJob]) -> None:
        """One transaction for ``jobs`` (under the write lock), then each one's effects
        and answer, in order."""
        if any(self.mirror.needs_activation(job.plan.batch.session_id) for job in jobs):
            await self._activate_mirrors(store, jobs)
            live = [job for job in jobs if not job.settled]
            if not live:
                return
        else:
            live = jobs  # nothing can have failed them yet
        if any(job.plan.removals is not None for job in live):
            live = self._not_removed(live)
            if not live:
                return
        batches = []
        for job in live:
            batch = job.plan.batch
            cursor = self.mirror.cursor(batch.session_id)
            batches.append(batch if cursor is None else batch.with_mirror_seq(cursor))
        # The write lock is held across the await: the effects below run in commit order.
        self._answer(live, await store.append_group(batches))

    def _not_removed(self, jobs: list[AppendJob]) -> list[AppendJob]:
        """Fail the jobs derived from events removed since they were planned (under the
        write lock, so no removal can come between this check and their commit); the
        others go on."""
        live = []
        for job in jobs:
            conflict = self.core.removal_conflict(job.plan)
            if conflict is None:
                live.append(job)
            else:
                job.fail(conflict)
        return live

    def _answer(
        self, live: list[AppendJob], outcomes: list[AppendOutcome | SessionServerError]
    ) -> None:
        """Each job's effects and answer, in commit order (the write lock is held)."""
        for job, outcome in zip(live, outcomes, strict=True):
            if isinstance(outcome, SessionServerError):
                job.fail(outcome)
                continue
            try:
                effects = self.core.committed(job.plan, outcome)
                if effects is not None:
                    self.run(effects)
            except Exception as exc:  # committed, but its effects failed: say so
                job.fail(exc)
            else:
                usage = job.plan.batch.usage
                if usage is not None and outcome.stored and self.on_usage is not None:
                    self.on_usage(usage)
                job.resolve(outcome.result)

    async def _activate_mirrors(self, store: AgentStore, jobs: list[AppendJob]) -> None:
        """Activate the mirror of each session the group appends to; the appends to a
        session whose activation failed fail, the others go on."""
        for sid in dict.fromkeys(job.plan.batch.session_id for job in jobs):
            if not self.mirror.needs_activation(sid):
                continue
            try:
                await self.mirror.ensure_active(store, sid)
            except Exception as exc:
                for job in jobs:
                    if job.plan.batch.session_id == sid:
                        job.fail(exc)

    def run(self, effects: Effects) -> None:
        """Effects of a commit, in commit order (the write lock is held)."""
        sid = effects.session_id
        if effects.mirror:
            self.mirror.appended(sid, effects.mirror)
        if effects.notify:
            self.subscriptions.publish(sid, effects.notify)
        if effects.snapshot is not None:
            self.mirror.snapshot(effects.snapshot)
