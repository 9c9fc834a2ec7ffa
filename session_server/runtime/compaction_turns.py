"""``CompactionTurns``: the compactions an actor runs for its core (I/O shell).

The core decides when a compaction is due and what it writes (``core.agent_core``); this
runs it: one compaction turn at a time per session (the core's ``begin_compaction``, the
turn only waits), ``summarize`` summaries in the background with a bounded wait, a
backoff after a failure and the placeholder fallback, and the summaries a persist
primes under token pressure; and the build of a working context, which runs the
compactions the core finds due on its way.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol, TypeVar

from ..compaction.fallback import FallbackCause
from ..compaction.records import CompactionPlan
from ..concurrency.worker_threads import WorkerThreads
from ..core.agent_core import AgentCore
from ..core.decisions import AppendPlan, CompactionDue, ContextDraft, free_in_steps
from ..core.needs import Known, Need
from ..process.ops_metrics import OperationsMetrics
from ..values.context import WorkingContext
from ..values.errors import ConflictError, SummarizerError
from ..values.plans import AppendResult
from .compaction_run import Offload, run_compaction
from .metrics import CompactionMetrics
from .off_loop import OFF_LOOP_EVENTS, instructions_counted, on_worker
from .summarizers import Summarizer
from .summary_backoffs import SummaryBackoffs

__all__ = ["CompactionHost", "CompactionTurns", "Pump", "SummaryOutcome"]

# The actor's logger: these records were the actor's before the turns had their own module.
log = logging.getLogger("session_server.runtime.actor")

T = TypeVar("T")

# What a build's wait for its summary came to (``CompactionTurns.summary``).
SummaryOutcome = Literal["written", "nothing", "slow", "failed"]


class Pump(Protocol):
    """The actor's pump, given with each call (the turns keep no reference back to the
    actor, so a dropped actor is freed at once)."""

    async def decide(self, ask: Callable[[Known], T | Need], known: Known | None = None) -> T:
        """Ask the core until it answers with something other than a read to run."""
        ...

    async def commit(self, plan: AppendPlan) -> AppendResult:
        """Queue an append plan for the actor's group commit; its answer after it."""
        ...


class CompactionHost(Protocol):
    """What the turns need from the actor's host (``ActorHost`` extends it)."""

    @property
    def executor(self) -> WorkerThreads:
        """The worker threads (large system instructions are counted there)."""
        ...

    @property
    def summarizer(self) -> Summarizer: ...

    @property
    def metrics(self) -> CompactionMetrics: ...

    @property
    def operations(self) -> OperationsMetrics: ...

    @property
    def compaction_wait(self) -> float:
        """Seconds a build waits for a summary before it answers with the previous record."""
        ...

    @property
    def compaction_timeout(self) -> float:
        """Seconds a background summary may take before it counts as failed."""
        ...

    @property
    def summary_backoffs(self) -> SummaryBackoffs:
        """The backoffs of failed summaries (``summary_backoff`` seconds first, doubling),
        kept across the actors' hibernation."""
        ...


class CompactionTurns:
    """One agent's compactions, run through the ``pump`` each call is given."""

    def __init__(
        self,
        agent_id: str,
        core: AgentCore,
        host: CompactionHost,
    ) -> None:
        self.agent_id = agent_id
        self.core = core
        self.host = host
        # Woken when a compaction ends, so a waiting one may begin (the core decides).
        self._compactions = asyncio.Condition()
        # Summaries run in the background, one per session; a failed one is retried after
        # a backoff (``host.summary_backoffs``: the host keeps it, so that it outlives
        # this actor's hibernation).
        self._summaries: dict[str, asyncio.Task[SummaryOutcome]] = {}
        self._primers: set[asyncio.Task[Any]] = set()

    @property
    def busy(self) -> bool:
        """A background summary or a primed build is running."""
        return bool(self._summaries) or bool(self._primers)

    async def cancel(self) -> None:
        """Cancel the background summaries and primed builds, and wait for them to end."""
        background = [*self._summaries.values(), *self._primers]
        for task in background:
            task.cancel()
        if background:
            await asyncio.gather(*background, return_exceptions=True)

    async def build(
        self,
        pump: Pump,
        session_id: str,
        instructions: list[str],
        limit: int | None,
        strategy: Mapping[str, Any] | None,
        *,
        may_compact: bool,
    ) -> WorkingContext:
        """The session's working context (``AgentActor.build_working_context``), running
        the compactions the core finds due on the way."""
        async with instructions_counted(self.host.executor, instructions):
            known = Known()
            while True:
                step: WorkingContext | ContextDraft | CompactionDue = await pump.decide(
                    lambda k: self.core.build(
                        session_id,
                        k,
                        instructions=instructions,
                        limit=limit,
                        strategy=strategy,
                        may_compact=may_compact,
                    ),
                    known,
                )
                if isinstance(step, WorkingContext):
                    return step
                if isinstance(step, ContextDraft):
                    return await on_worker(self.host.executor, step.build)  # a large window
                if step.config.mode == "summarize" and not step.force:
                    # Off the critical path: the build waits a bounded time, then answers with
                    # the previous record (and placeholders, if the strategy has them) while
                    # the summary goes on (or is retried later).
                    outcome = await self.summary(pump, step)
                    if outcome == "slow" or outcome == "failed":
                        await self.placeholder_fallback(pump, step, outcome)
                else:
                    await self.compaction(pump, step)
                known.compacted = True
                known.forget_views(session_id)  # it may have committed: ask the cache again

    async def summary(self, pump: Pump, due: CompactionDue) -> SummaryOutcome:
        """Start (or join) the session's background summary and wait for it at most
        ``compaction_wait`` seconds: ``written``, ``nothing`` (done, nothing to write),
        ``slow`` (still running) or ``failed`` (failed, timed out, or backing off)."""
        sid = due.session_id
        task = self._summaries.get(sid)
        if task is None:
            if self.host.summary_backoffs.backing_off(self.agent_id, sid):
                return "failed"  # backing off after a failure: the previous record applies
            task = asyncio.ensure_future(self._background_summary(pump, due))
            self._summaries[sid] = task
            task.add_done_callback(lambda t: self._summary_done(sid, t))
        done, _ = await asyncio.wait({task}, timeout=self.host.compaction_wait)
        if task in done:
            return "failed" if task.cancelled() else task.result()
        self.host.metrics.summary_slow()
        log.warning(
            "summary of %r/%r is taking longer than %.1fs: answering with the previous "
            "compaction record; it goes on in the background",
            self.agent_id,
            sid,
            self.host.compaction_wait,
        )
        return "slow"

    def _summary_done(self, session_id: str, task: asyncio.Task[SummaryOutcome]) -> None:
        if self._summaries.get(session_id) is task:
            del self._summaries[session_id]

    async def _background_summary(self, pump: Pump, due: CompactionDue) -> SummaryOutcome:
        """One summary, bounded by ``compaction_timeout``; a failure is logged, counted
        and backed off (``summary_backoff`` seconds, doubling, at most 5 min), never
        raised to a build."""
        sid = due.session_id
        try:
            plan = await asyncio.wait_for(
                self._compaction_turn(pump, due), timeout=self.host.compaction_timeout
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            delay = self.host.summary_backoffs.failed(self.agent_id, sid)
            self.host.metrics.summary_failed()
            reason = "timed out" if isinstance(exc, TimeoutError) else f"failed: {exc}"
            log.warning(
                "summary of %r/%r %s; the previous compaction record applies; retrying in %.0fs",
                self.agent_id,
                sid,
                reason,
                delay,
            )
            return "failed"
        self.host.summary_backoffs.succeeded(self.agent_id, sid)
        self.report_futile(sid)
        return "nothing" if plan.record is None else "written"

    async def placeholder_fallback(
        self, pump: Pump, due: CompactionDue, cause: FallbackCause
    ) -> None:
        """The summary is ``cause``: write the placeholder record the core plans (when
        the strategy sets placeholder parameters), logged and counted. A session that
        moved meanwhile refuses it: the build answers with what is there."""
        fallback = await pump.decide(
            lambda known: self.core.placeholder_fallback(due, cause, known)
        )
        if fallback is None:
            return
        try:
            await pump.commit(fallback.append)
        except ConflictError:
            return  # a turn or the summary landed since: nothing to fall back from
        self.host.metrics.observe(fallback.plan)
        self.host.metrics.summary_fallback()
        log.warning(
            "summary of %r/%r %s: placeholders apply meanwhile (%s)",
            self.agent_id,
            due.session_id,
            cause,
            fallback.plan.reason,
        )

    def prime(
        self,
        pump: Pump,
        session_id: str,
        instructions: list[str],
        strategy: Mapping[str, Any] | None,
    ) -> None:
        """A persist flagged token pressure: start the summary now, in the background, so
        the next build usually finds it done."""

        async def prime() -> None:
            try:
                await self.build(pump, session_id, instructions, None, strategy, may_compact=True)
            except Exception:
                log.exception("background build of %r/%r failed", self.agent_id, session_id)

        task = asyncio.ensure_future(prime())
        self._primers.add(task)
        task.add_done_callback(self._primers.discard)

    async def compaction(self, pump: Pump, due: CompactionDue) -> CompactionPlan:
        """Plan and, when there is something to do, append one compaction event.

        Runs as its own task: a caller cancelled mid-way does not end the session's
        compaction turn before the append finished (the flag is acted on exactly once).
        """
        return await asyncio.shield(asyncio.ensure_future(self._compaction_turn(pump, due)))

    async def _compaction_turn(self, pump: Pump, due: CompactionDue) -> CompactionPlan:
        sid = due.session_id
        async with self._compactions:
            await self._compactions.wait_for(lambda: self.core.begin_compaction(sid))
        try:
            # Before the reads: a removal committed while they run refuses the append.
            removals = self.core.removals(sid)
            # Read again inside the turn: an earlier compaction may have acted already.
            given = await pump.decide(lambda known: self.core.compaction_input(due, known))
            try:
                # It counts the context before and after with the instructions: this
                # turn may outlive the build that counted them ahead (a summary), or
                # have none (``memory.compact``).
                async with instructions_counted(self.host.executor, due.instructions):
                    plan = await run_compaction(
                        given.events,
                        due.config,
                        previous_record=given.record_data,
                        summarizer=self.host.summarizer,
                        force=due.force,
                        pressure=given.pressure,
                        system_instructions=due.instructions,
                        offload=self._offload(len(given.events)),
                    )
            except SummarizerError:
                self.host.operations.summarizer_failures.inc()
                raise
            append = self.core.after_compaction(due, given, plan, removals=removals)
            if given.owned and len(given.events) >= OFF_LOOP_EVENTS:
                # Freed a slice at a time on a worker: dropped with ``given`` on the loop,
                # the events of a long session were one long deallocation there.
                await on_worker(self.host.executor, functools.partial(free_in_steps, given.events))
            if append is not None:
                try:
                    await pump.commit(append)
                except ConflictError as exc:
                    if (exc.data or {}).get("reason") != "events_removed":
                        raise
                    # Derived from deleted events: nothing written, the flag stays set,
                    # and the next build compacts what is left.
                    return CompactionPlan(plan.strategy, None, exc.message)
            if append is not None and append.batch.events:
                self.host.metrics.observe(plan)
                return plan
            return CompactionPlan(plan.strategy, None, plan.reason) if plan.record else plan
        finally:
            self.core.end_compaction(sid)
            async with self._compactions:
                self._compactions.notify_all()

    def _offload(self, events: int) -> Offload | None:
        """Where the pure work over ``events`` events runs: on a worker thread when they
        are many (``OFF_LOOP_EVENTS``), else here (``None``)."""
        if events < OFF_LOOP_EVENTS:
            return None
        return functools.partial(on_worker, self.host.executor)

    def report_futile(self, session_id: str) -> None:
        """Log and count, once per reason, why a compaction would gain nothing."""
        note = self.core.futile_note(session_id)
        if note is not None:
            self.host.metrics.compaction_futile()
            log.warning("no compaction of %r/%r: %s", self.agent_id, session_id, note)
