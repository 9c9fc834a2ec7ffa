"""The placeholder fallback while a summary cannot be had (``compaction.fallback``)."""

from __future__ import annotations

from typing import Any

import pytest

from session_server.compaction.builder import build_compacted_context, build_parts
from session_server.compaction.config import StrategyConfig, resolve_strategy
from session_server.compaction.fallback import plan_placeholder_fallback, sets_placeholders
from session_server.compaction.placeholders import output_placeholder
from session_server.compaction.summarize import (
    SummaryResult,
    make_summary_record,
    plan_summarize,
)
from session_server.values.codec import encode_json

from .sessions import tool_session

SUMMARIZE: dict[str, Any] = {"mode": "summarize", "raw_tail_turns": 2}


def config(*levels: dict[str, Any] | None) -> StrategyConfig:
    """The effective strategy of levels server, agent, session, request (in order)."""
    return resolve_strategy(*levels)


@pytest.mark.parametrize(
    ("levels", "expected"),
    [
        ((SUMMARIZE,), False),  # summarize alone: no placeholders to fall back to
        (({**SUMMARIZE, "compact_keep": 2},), True),  # the default value, set explicitly
        (({**SUMMARIZE, "compact_clear_tool_inputs": True},), True),
        (({**SUMMARIZE, "compact_exclude_tools": ["search"]},), True),
        (({**SUMMARIZE, "compact_include_tools": ["search"]},), True),
        # Any level may set them: server default, then agent, session, request.
        (({"compact_keep": 1}, None, SUMMARIZE, None), True),
        ((None, None, SUMMARIZE, {"compact_keep": 3}), True),
        # A compact trigger is no placeholder parameter; other modes never fall back.
        (({**SUMMARIZE, "compact_trigger_turns": 2},), False),
        (({"mode": "compact", "compact_keep": 1},), False),
        (({"mode": "none", "compact_keep": 1},), False),
    ],
)
def test_only_a_summarize_strategy_that_sets_placeholder_params_falls_back(
    levels: tuple[dict[str, Any] | None, ...], expected: bool
) -> None:
    assert sets_placeholders(config(*levels)) is expected


def test_without_placeholder_params_nothing_is_planned() -> None:
    log = tool_session(6)
    plan = plan_placeholder_fallback(
        log.events, config(SUMMARIZE), cause="failed", previous_record=None
    )
    assert plan.record is None and "no placeholder fallback" in plan.reason


def test_the_fallback_is_a_compact_record_over_the_current_history() -> None:
    log = tool_session(6)
    strategy = config({**SUMMARIZE, "compact_keep": 2})
    plan = plan_placeholder_fallback(
        log.events, strategy, cause="slow", previous_record=None, now_ms=7
    )
    record = plan.record
    assert record is not None and plan.reason.startswith("summary slow: compacted 4")
    assert record["strategy"] == "compact" and record["triggers"] == ["token_pressure"]
    assert record["fallback"] == {"for": "summarize", "cause": "slow"}
    assert record["boundary_turn"] == 5 and plan.items_removed == 4
    encode_json(record)
    # Old tool outputs are placeholders, the last compact_keep turns stay whole.
    tools = [m for m in build_parts(log.events, record).messages if m.role == "tool"]
    assert [m.compacted for m in tools] == [True] * 4 + [False] * 2
    assert tools[0].content == output_placeholder("read_file", "call_1")
    assert plan.tokens_after is not None and plan.tokens_before is not None
    assert plan.tokens_after < plan.tokens_before


def test_a_second_fallback_over_the_same_history_plans_nothing_then_follows_new_turns() -> None:
    log = tool_session(6)
    strategy = config({**SUMMARIZE, "compact_keep": 2})
    first = plan_placeholder_fallback(log.events, strategy, cause="failed", previous_record=None)
    assert first.record is not None
    log.compaction(first.record, first.event_count)
    built = build_compacted_context(log.events, record=first.record).messages
    again = plan_placeholder_fallback(
        log.events, strategy, cause="failed", previous_record=first.record
    )
    assert again.record is None and "boundary would not move" in again.reason
    # The prompt is byte-stable until the history grows ...
    assert build_compacted_context(log.events, record=first.record).messages == built
    # ... and a new turn during the outage moves the placeholders forward with it.
    log.tool_turn(7)
    moved = plan_placeholder_fallback(
        log.events, strategy, cause="failed", previous_record=first.record
    )
    assert moved.record is not None and moved.items_removed == 1
    assert moved.record["boundary_turn"] == 6


def test_the_fallback_keeps_the_memory_of_an_earlier_summary() -> None:
    log = tool_session(5)
    strategy = config({**SUMMARIZE, "compact_keep": 1})
    request = plan_summarize(log.events, strategy).request
    assert request is not None
    summary = make_summary_record(request, SummaryResult("turns 1-3 looked up"), strategy)
    log.compaction(summary, request.event_count)
    for i in (6, 7):
        log.tool_turn(i)
    plan = plan_placeholder_fallback(log.events, strategy, cause="failed", previous_record=summary)
    assert plan.record is not None
    assert plan.record["memory"]["episodic"] == summary["episodic"]
    ctx = build_compacted_context(log.events, record=plan.record)
    assert "turns 1-3 looked up" in ctx.system_instructions[-1]
    tools = [m for m in ctx.messages if m.role == "tool"]
    # Turns 4..7 are after the summary; all but the last one's output are placeholders.
    assert [m.compacted for m in tools] == [True, True, True, False]


def test_a_summary_written_after_the_fallback_supersedes_it() -> None:
    log = tool_session(6)
    strategy = config({**SUMMARIZE, "compact_keep": 2})
    fallback = plan_placeholder_fallback(
        log.events, strategy, cause="failed", previous_record=None
    ).record
    assert fallback is not None
    log.compaction(fallback)
    request = plan_summarize(log.events, strategy, previous_record=fallback).request
    assert request is not None and request.turn_ids[0] == "turn_0001"
    summary = make_summary_record(request, SummaryResult("all four turns"), strategy)
    log.compaction(summary, request.event_count)
    ctx = build_compacted_context(log.events, record=summary)
    assert "all four turns" in ctx.system_instructions[-1]
    assert not any(m.compacted for m in ctx.messages)  # the raw tail, no placeholders
    assert next(m.content for m in ctx.messages if m.role == "user").startswith("Question 5")
