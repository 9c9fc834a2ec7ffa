"""One call that plans (and, for summarize, summarises) a compaction.

``run_compaction`` is a coroutine only because a summarizer may do I/O; it performs
none itself and imports no event loop. It never writes: the caller appends
``make_compaction_event(session_id, plan.record, plan.event_count)`` when
``plan.record`` is not ``None``. When the summarizer fails, ``SummarizerError``
propagates and nothing is to be written.

Its pure steps (planning, a summarizer's ``summarize_sync`` when it has one, the token
counts and the record) are linear in the session and run through ``offload`` when the
caller gives one: the actor passes its worker threads, so a summary of a long session
never holds the event loop that serves every other client.

Triggers: ``compact`` fires on its configured triggers, token ``pressure`` or ``force``;
``summarize`` fires on token ``pressure`` or ``force`` (an explicit ``memory.compact``).
Mode ``none`` never compacts.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, cast

from ..compaction.builder import build_parts
from ..compaction.compact import plan_compact
from ..compaction.config import StrategyConfig
from ..compaction.records import CompactionPlan
from ..compaction.summarize import (
    SummaryPlan,
    SummaryRequest,
    SummaryResult,
    make_summary_record,
    plan_summarize,
)
from ..core.decisions import free_in_steps
from ..values.errors import SummarizerError
from ..values.events import SessionEvent
from .summarizers import ExtractiveSummarizer, Summarizer

__all__ = ["Offload", "run_compaction"]

T = TypeVar("T")

Offload = Callable[[Callable[[], Any]], Awaitable[Any]]
"""Runs a pure step somewhere (``await offload(fn)`` is ``fn()``), e.g. on a worker thread."""


async def _inline(fn: Callable[[], T]) -> T:
    return fn()


async def run_compaction(
    events: Sequence[SessionEvent],
    config: StrategyConfig,
    *,
    previous_record: Mapping[str, Any] | None,
    summarizer: Summarizer | None = None,
    force: bool = False,
    pressure: bool = False,
    system_instructions: Iterable[str] = (),
    token_count: int | None = None,
    model: str | None = None,
    now_ms: int | None = None,
    offload: Offload | None = None,
) -> CompactionPlan:
    """Plan a compaction of ``events`` (the window loaded per ``load_from_seq``).

    ``summarizer`` defaults to ``ExtractiveSummarizer``. Returns a plan whose
    ``record`` is ``None`` (with a ``reason``) when there is nothing to do. Raises
    ``SummarizerError`` when the summarizer fails (any exception it raises is wrapped).
    ``offload`` runs the pure steps (see the module docstring); without it they run here.
    ``events`` and ``previous_record`` must not change until the plan is returned.
    """
    run: Offload = offload or _inline
    system = list(system_instructions)
    if config.mode == "none":
        return CompactionPlan("none", None, "strategy mode is 'none': nothing to compact")
    if config.mode == "compact":
        compact: CompactionPlan = await run(
            lambda: plan_compact(
                events,
                config,
                previous_record=previous_record,
                force=force,
                pressure=pressure,
                system_instructions=system,
                token_count=token_count,
                model=model,
                now_ms=now_ms,
            )
        )
        return compact
    if not (force or pressure):
        return CompactionPlan(
            "summarize", None, "no summarize trigger (token pressure or an explicit compact)"
        )
    plan: SummaryPlan = await run(
        lambda: plan_summarize(events, config, previous_record=previous_record)
    )
    request = plan.request
    if request is None:
        return CompactionPlan("summarize", None, plan.reason)
    summ = summarizer if summarizer is not None else ExtractiveSummarizer()
    try:
        summarize_sync = _sync_summary(summ)
        if summarize_sync is not None:
            # Pure computation (the extractive summarizer): on ``offload`` as well.
            result: SummaryResult = await run(lambda: summarize_sync(request))
        else:
            result = await summ.summarize(request)
    except SummarizerError:
        raise
    except Exception as exc:
        raise SummarizerError(
            f"summarizer {getattr(summ, 'name', type(summ).__name__)!r} failed: "
            f"{exc.__class__.__name__}: {exc}"
        ) from exc
    done: CompactionPlan = await run(
        lambda: _summary_plan(
            events,
            config,
            request,
            result,
            previous_record=previous_record,
            summarizer=str(getattr(summ, "name", type(summ).__name__)),
            force=force,
            pressure=pressure,
            system=system,
            token_count=token_count,
            model=model,
            now_ms=now_ms,
        )
    )
    return done


def _sync_summary(summarizer: Summarizer) -> Callable[[SummaryRequest], SummaryResult] | None:
    """The summarizer's ``summarize_sync`` (pure: no I/O, the same result as
    ``summarize``), when the class that defines its ``summarize`` defines that too: a
    subclass overriding ``summarize`` alone (a gate, a log) is awaited as it is."""
    sync = getattr(summarizer, "summarize_sync", None)
    if not callable(sync):
        return None

    def owner(name: str) -> type | None:
        return next((k for k in type(summarizer).__mro__ if name in vars(k)), None)

    return (
        cast(Callable[[SummaryRequest], SummaryResult], sync)
        if owner("summarize") is owner("summarize_sync")
        else None
    )


def _summary_plan(
    events: Sequence[SessionEvent],
    config: StrategyConfig,
    request: SummaryRequest,
    result: SummaryResult,
    *,
    previous_record: Mapping[str, Any] | None,
    summarizer: str,
    force: bool,
    pressure: bool,
    system: list[str],
    token_count: int | None,
    model: str | None,
    now_ms: int | None,
) -> CompactionPlan:
    """The summarize plan for ``result``: the record, with the context's token counts
    before and after it (pure)."""
    episodic, semantic = config.max_episodic_items, config.max_semantic_items
    before = build_parts(
        events,
        previous_record,
        model=model,
        max_episodic_items=episodic,
        max_semantic_items=semantic,
    )
    tokens_before = token_count if token_count is not None else before.token_count(system, model)
    triggers = [name for name, on in (("token_pressure", pressure), ("explicit", force)) if on]
    record = make_summary_record(
        request,
        result,
        config,
        summarizer=summarizer,
        triggers=triggers,
        tokens_before=tokens_before,
        now_ms=now_ms,
    )
    after = build_parts(
        events, record, model=model, max_episodic_items=episodic, max_semantic_items=semantic
    )
    tokens_after = after.token_count(system, model)
    record["tokens_after"] = tokens_after
    done = CompactionPlan(
        "summarize",
        record,
        f"summarised {len(request.turns)} turn(s) "
        f"(seq {request.seq_range[0]}..{request.seq_range[1]})",
        event_count=request.event_count,
        items_removed=0,
        tokens_before=tokens_before,
        tokens_after=tokens_after,
    )
    # The request's turns (one object and list per turn) are freed here, a slice at a
    # time, not by the caller: dropped at once, on the event loop, 100k turns held it
    # (and the GIL) in one deallocation.
    free_in_steps(request.turns)
    return done
