"""One call that plans (and, for summarize, summarises) a compaction.

``run_compaction`` is a coroutine only because a summarizer may do I/O; it performs
none itself and imports no event loop. It never writes: the caller appends
``make_compaction_event(session_id, plan.record, plan.event_count)`` when
``plan.record`` is not ``None``. When the summarizer fails, ``SummarizerError``
propagates and nothing is to be written.

Triggers: ``compact`` fires on its configured triggers, token ``pressure`` or ``force``;
``summarize`` fires on token ``pressure`` or ``force`` (an explicit ``memory.compact``).
Mode ``none`` never compacts.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..compaction.builder import build_parts
from ..compaction.compact import plan_compact
from ..compaction.config import StrategyConfig
from ..compaction.records import CompactionPlan
from ..compaction.summarize import make_summary_record, plan_summarize
from ..core.errors import SummarizerError
from ..core.events import SessionEvent
from .summarizers import ExtractiveSummarizer, Summarizer

__all__ = ["run_compaction"]


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
) -> CompactionPlan:
    """Plan a compaction of ``events`` (the window loaded per ``load_from_seq``).

    ``summarizer`` defaults to ``ExtractiveSummarizer``. Returns a plan whose
    ``record`` is ``None`` (with a ``reason``) when there is nothing to do. Raises
    ``SummarizerError`` when the summarizer fails (any exception it raises is wrapped).
    """
    system = list(system_instructions)
    if config.mode == "none":
        return CompactionPlan("none", None, "strategy mode is 'none': nothing to compact")
    if config.mode == "compact":
        return plan_compact(
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
    if not (force or pressure):
        return CompactionPlan(
            "summarize", None, "no summarize trigger (token pressure or an explicit compact)"
        )
    plan = plan_summarize(events, config, previous_record=previous_record)
    if plan.request is None:
        return CompactionPlan("summarize", None, plan.reason)
    summ = summarizer if summarizer is not None else ExtractiveSummarizer()
    try:
        result = await summ.summarize(plan.request)
    except SummarizerError:
        raise
    except Exception as exc:
        raise SummarizerError(
            f"summarizer {getattr(summ, 'name', type(summ).__name__)!r} failed: "
            f"{exc.__class__.__name__}: {exc}"
        ) from exc
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
        plan.request,
        result,
        config,
        summarizer=str(getattr(summ, "name", type(summ).__name__)),
        triggers=triggers,
        tokens_before=tokens_before,
        now_ms=now_ms,
    )
    after = build_parts(
        events, record, model=model, max_episodic_items=episodic, max_semantic_items=semantic
    )
    tokens_after = after.token_count(system, model)
    record["tokens_after"] = tokens_after
    return CompactionPlan(
        "summarize",
        record,
        f"summarised {len(plan.request.turns)} turn(s) "
        f"(seq {plan.request.seq_range[0]}..{plan.request.seq_range[1]})",
        event_count=plan.request.event_count,
        items_removed=0,
        tokens_before=tokens_before,
        tokens_after=tokens_after,
    )
