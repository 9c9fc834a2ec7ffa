"""Compaction (DESIGN §6), pure: strategy config, planners, builder, records, triggers.

The actor's part is small::

    config = resolve_strategy(server, agent, session_strategy, request_strategy)
    record = <the ``compaction`` dict of the session's latest compaction event> or None
    events = <load events with seq >= load_from_seq(record) (all when None)>
    plan = await run_compaction(events, config, previous_record=record,
                                summarizer=..., force=explicit, pressure=flag)
    if plan.record is not None:
        append make_compaction_event(session_id, plan.record, plan.event_count)
        metrics.observe(plan); record = plan.record
    ctx = build_compacted_context(events, record=record, system_instructions=...,
                                  base_seq=last_seq, config=config)

and on persist: ``token_pressure(usage, config).required`` is the
``compaction_required`` flag. Everything here is pure: the summarizers, the runner
(``run_compaction``) and the metrics live in ``session_server.runtime``.
"""

from __future__ import annotations

from ..values.records import record_memory
from .builder import BuiltContext, build_compacted_context, build_parts, load_from_seq
from .compact import plan_compact
from .config import (
    COMPACT_PARAM_NAMES,
    DEFAULT_REMAINING_PCT,
    LEVELS,
    Mode,
    StrategyConfig,
    effective_remaining_pct,
    resolve_strategy,
    validate_strategy,
)
from .fallback import FallbackCause, plan_placeholder_fallback, sets_placeholders
from .memory import SemanticFact, memory_block, merge_semantic, turn_id
from .placeholders import input_placeholder, output_placeholder, tool_selected
from .records import RECORD_VERSION, CompactionPlan, latest_record, make_compaction_event
from .summarize import (
    SummaryPlan,
    SummaryRequest,
    SummaryResult,
    SummaryTurn,
    make_summary_record,
    plan_summarize,
    render_transcript,
)
from .summary_json import parse_summary_json
from .triggers import (
    TokenPressure,
    TriggerCheck,
    check_compact_triggers,
    compaction_required,
    input_budget,
    token_pressure,
)

__all__ = [
    "COMPACT_PARAM_NAMES",
    "DEFAULT_REMAINING_PCT",
    "LEVELS",
    "RECORD_VERSION",
    "BuiltContext",
    "CompactionPlan",
    "FallbackCause",
    "Mode",
    "SemanticFact",
    "StrategyConfig",
    "SummaryPlan",
    "SummaryRequest",
    "SummaryResult",
    "SummaryTurn",
    "TokenPressure",
    "TriggerCheck",
    "build_compacted_context",
    "build_parts",
    "check_compact_triggers",
    "compaction_required",
    "effective_remaining_pct",
    "input_budget",
    "input_placeholder",
    "latest_record",
    "load_from_seq",
    "make_compaction_event",
    "make_summary_record",
    "memory_block",
    "merge_semantic",
    "output_placeholder",
    "parse_summary_json",
    "plan_compact",
    "plan_placeholder_fallback",
    "plan_summarize",
    "record_memory",
    "render_transcript",
    "resolve_strategy",
    "sets_placeholders",
    "token_pressure",
    "tool_selected",
    "turn_id",
    "validate_strategy",
]
