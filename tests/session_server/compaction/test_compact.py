from __future__ import annotations

from typing import Any

from session_server.compaction.builder import build_parts
from session_server.compaction.compact import plan_compact
from session_server.compaction.config import StrategyConfig
from session_server.compaction.placeholders import input_placeholder, output_placeholder
from session_server.compaction.records import CompactionPlan
from session_server.values.codec import encode_json

from .sessions import SessionLog, tool_session

COMPACT = StrategyConfig(mode="compact")
NO_TOKENS = StrategyConfig(mode="compact", token_budget=10**9)  # token trigger never fires


def _first_seq_of_turn(log: SessionLog, turn: int) -> int:
    return next(e.seq for e in log.events if e.turn == turn and e.action == "user_message")


def test_too_few_turns_is_a_noop_that_says_so() -> None:
    log = tool_session(2)
    plan = plan_compact(log.events, COMPACT, force=True)
    assert plan.record is None and not plan.changed
    assert "nothing to compact" in plan.reason and "compact_keep=2" in plan.reason


def test_forced_compact_replaces_outputs_outside_the_last_keep_turns() -> None:
    log = tool_session(6)
    plan = plan_compact(log.events, COMPACT, force=True, now_ms=123)
    rec = plan.record
    assert rec is not None
    assert rec["strategy"] == "compact" and rec["version"] == 1
    assert rec["boundary_turn"] == 5
    assert rec["boundary_seq"] == _first_seq_of_turn(log, 5)
    assert rec["params"] == COMPACT.to_dict()
    assert rec["triggers"] == ["explicit"]
    assert rec["removed_items"] == rec["new_items"] == plan.items_removed == 4
    assert rec["created_at"] == 123
    assert plan.event_count == 16  # four whole turns of four events
    assert plan.tokens_before is not None and plan.tokens_after is not None
    assert plan.tokens_after < plan.tokens_before
    encode_json(rec)  # JSON-serialisable
    parts = build_parts(log.events, rec)
    tool_msgs = [m for m in parts.messages if m.role == "tool"]
    assert [m.compacted for m in tool_msgs] == [True] * 4 + [False] * 2
    assert tool_msgs[0].content == output_placeholder("read_file", "call_1")
    assert tool_msgs[-1].content.startswith("result 6:")


def test_keep_parameter_sets_how_many_turns_stay_whole() -> None:
    log = tool_session(6)
    for keep in (1, 3, 5):
        rec = plan_compact(
            log.events, StrategyConfig(mode="compact", compact_keep=keep), force=True
        ).record
        assert rec is not None
        assert rec["boundary_turn"] == 7 - keep
        assert rec["removed_items"] == 6 - keep


def test_keep_zero_compacts_every_turn() -> None:
    log = tool_session(3)
    rec = plan_compact(
        log.events, StrategyConfig(mode="compact", compact_keep=0), force=True
    ).record
    assert rec is not None
    assert rec["boundary_seq"] == log.events[-1].seq + 1
    assert rec["removed_items"] == 3


def test_no_trigger_means_no_record() -> None:
    log = tool_session(6)
    plan = plan_compact(log.events, NO_TOKENS)
    assert plan.record is None and plan.reason.startswith("no compact trigger fired")
    assert plan.tokens_before is not None


def test_turn_trigger_counts_turns_since_the_boundary() -> None:
    cfg = StrategyConfig(mode="compact", compact_trigger_turns=3)
    log = tool_session(3)
    assert plan_compact(log.events, cfg).record is None
    log.tool_turn(4)
    rec = plan_compact(log.events, cfg).record
    assert (
        rec is not None
        and rec["boundary_turn"] == 3
        and rec["triggers"] == ["compact_trigger_turns"]
    )
    log.compaction(rec)
    # turns 3, 4, 5 are not behind the boundary yet: 3 is not more than 3
    log.tool_turn(5)
    assert plan_compact(log.events, cfg, previous_record=rec).record is None
    log.tool_turn(6)
    rec2 = plan_compact(log.events, cfg, previous_record=rec).record
    assert rec2 is not None and rec2["boundary_turn"] == 5
    assert rec2["removed_items"] == 4 and rec2["new_items"] == 2


def test_token_budget_trigger_uses_the_built_context() -> None:
    log = tool_session(6, payload=200)
    tokens = plan_compact(log.events, NO_TOKENS).tokens_before
    assert tokens is not None
    under = StrategyConfig(mode="compact", token_budget=tokens)
    assert plan_compact(log.events, under).record is None
    over = StrategyConfig(mode="compact", token_budget=tokens - 1)
    rec = plan_compact(log.events, over).record
    assert rec is not None and rec["triggers"] == ["token_budget"]
    assert rec["tokens_before"] == tokens


def test_soft_budget_and_remaining_pct_triggers() -> None:
    log = tool_session(6, payload=200)
    tokens = plan_compact(log.events, NO_TOKENS).tokens_before
    assert tokens is not None
    soft = StrategyConfig(mode="compact", token_soft_budget=tokens - 1)
    assert plan_compact(log.events, soft).record is not None
    window = tokens + 10  # ~0% remaining
    pct = StrategyConfig(mode="compact", context_window_tokens=window, token_remaining_pct=0.5)
    assert plan_compact(log.events, pct).record is not None
    soft_pct = StrategyConfig(
        mode="compact", context_window_tokens=window, token_soft_remaining_pct=0.5
    )
    rec = plan_compact(log.events, soft_pct).record
    assert rec is not None and rec["triggers"] == ["token_soft_remaining_pct"]
    default = StrategyConfig(mode="compact", context_window_tokens=window)
    rec = plan_compact(log.events, default).record
    assert rec is not None and rec["triggers"] == ["token_remaining_pct"]
    roomy = StrategyConfig(mode="compact", context_window_tokens=tokens * 10)
    assert plan_compact(log.events, roomy).record is None


def test_caller_supplied_token_count_is_used() -> None:
    log = tool_session(6, payload=5)
    cfg = StrategyConfig(mode="compact", token_budget=1000)
    assert plan_compact(log.events, cfg, token_count=999).record is None
    assert plan_compact(log.events, cfg, token_count=1001).record is not None


def test_token_pressure_triggers_compact() -> None:
    log = tool_session(6)
    rec = plan_compact(log.events, NO_TOKENS, pressure=True).record
    assert rec is not None and rec["triggers"] == ["token_pressure"]


def test_boundary_that_does_not_move_writes_nothing() -> None:
    log = tool_session(6)
    always = StrategyConfig(mode="compact", token_budget=1)
    rec = plan_compact(log.events, always).record
    assert rec is not None
    log.compaction(rec)
    again = plan_compact(log.events, always, previous_record=rec)
    assert again.record is None and "boundary would not move" in again.reason
    forced = plan_compact(log.events, always, previous_record=rec, force=True)
    assert forced.record is None


def test_boundary_moving_over_turns_without_tools_writes_nothing() -> None:
    log = tool_session(4)
    always = StrategyConfig(mode="compact", token_budget=1)
    rec = plan_compact(log.events, always).record
    assert rec is not None
    log.compaction(rec)
    log.chat_turn(5)
    log.chat_turn(6)
    # the boundary moves to turn 5 over turns 3-4, which hold tool payloads
    plan = plan_compact(log.events, always, previous_record=rec)
    assert plan.record is not None and plan.record["new_items"] == 2
    log.compaction(plan.record)
    log.chat_turn(7)
    log.chat_turn(8)
    quiet = plan_compact(log.events, always, previous_record=plan.record)
    assert quiet.record is None and "nothing new to compact" in quiet.reason


def test_only_chat_turns_have_nothing_to_compact() -> None:
    log = SessionLog()
    for i in range(5):
        log.chat_turn(i)
    plan = plan_compact(log.events, COMPACT, force=True)
    assert plan.record is None and "no selected tool payload" in plan.reason


def test_boundary_never_splits_a_call_from_a_late_result() -> None:
    log = SessionLog()
    log.tool_turn(1)
    log.tool_turn(2)
    log.user("turn 3")
    log.call("late", "search", q="x")
    log.user("turn 4 arrives before the result")
    log.result("late", "search", "late result")
    log.answer("done")
    log.tool_turn(5)
    rec = plan_compact(log.events, COMPACT, force=True).record
    assert rec is not None
    # keep 2 would cut at turn 4, separating 'late' from its result: moved back to turn 3
    assert rec["boundary_turn"] == 3
    assert rec["boundary_seq"] == _first_seq_of_turn(log, 3)
    seqs = {
        e.seq
        for e in log.events
        if e.tool_call_id == "late"
        or (e.action == "tool_call_request" and e.tool_calls and e.tool_calls[0].id == "late")
    }
    assert all(s >= rec["boundary_seq"] for s in seqs)


def test_clear_tool_inputs_counts_inputs_too() -> None:
    log = tool_session(4)
    cfg = StrategyConfig(mode="compact", compact_clear_tool_inputs=True)
    rec = plan_compact(log.events, cfg, force=True).record
    assert rec is not None and rec["removed_items"] == 4  # 2 outputs + 2 inputs
    msgs = build_parts(log.events, rec).messages
    first_call = next(m for m in msgs if m.tool_calls)
    assert first_call.tool_calls is not None and first_call.tool_calls[0].arguments == {}
    assert first_call.content == input_placeholder("read_file", "call_1")


def test_include_and_exclude_lists_select_tools() -> None:
    log = tool_session(6)  # tools cycle read_file, weather_api, search
    excl = StrategyConfig(mode="compact", compact_exclude_tools=["weather_api"])
    rec = plan_compact(log.events, excl, force=True).record
    assert rec is not None and rec["removed_items"] == 3
    incl = StrategyConfig(
        mode="compact", compact_include_tools=["weather_api"], compact_exclude_tools=["weather_api"]
    )
    rec = plan_compact(log.events, incl, force=True).record
    assert rec is not None and rec["removed_items"] == 1


def test_forced_compact_with_new_params_rewrites_the_record() -> None:
    log = tool_session(6)
    rec = plan_compact(log.events, COMPACT, force=True).record
    assert rec is not None
    cfg = StrategyConfig(mode="compact", compact_clear_tool_inputs=True)
    assert plan_compact(log.events, cfg, previous_record=rec, pressure=True).record is None
    forced = plan_compact(log.events, cfg, previous_record=rec, force=True)
    assert forced.record is not None and forced.record["removed_items"] == 8
    assert forced.items_removed == 4


def test_summarize_memory_is_carried_into_a_compact_record() -> None:
    log = tool_session(8)
    tail_seq = _first_seq_of_turn(log, 5)
    memory: dict[str, Any] = {
        "strategy": "summarize",
        "episodic": [
            {
                "id": "ep_0001",
                "ts": 1.0,
                "turn_ids": ["turn_0001"],
                "summary": "s",
                "tags": [],
                "salience": 0.5,
            }
        ],
        "semantic": [],
        "tail_start_seq": tail_seq,
        "tail_start_turn": 5,
        "boundary_seq": tail_seq,
    }
    plan = plan_compact(log.events, COMPACT, previous_record=memory, force=True)
    rec = plan.record
    assert rec is not None
    assert (
        rec["memory"]["tail_start_seq"] == tail_seq
        and rec["memory"]["episodic"] == memory["episodic"]
    )
    assert rec["boundary_turn"] == 7 and rec["removed_items"] == 2
    assert plan.event_count == 8  # turns 5 and 6 only; earlier ones were summarised


def test_plan_is_a_value() -> None:
    plan = CompactionPlan("compact", None, "why")
    assert not plan.changed and plan.event_count == 0
