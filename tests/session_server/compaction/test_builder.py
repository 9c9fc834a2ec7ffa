from __future__ import annotations

from typing import Any

import pytest

from session_server.adapters.workers_ai import adapter as workers_ai
from session_server.compaction.builder import build_compacted_context, load_from_seq
from session_server.compaction.compact import plan_compact
from session_server.compaction.config import StrategyConfig
from session_server.compaction.memory import RECENT_HEADER
from session_server.compaction.placeholders import output_placeholder
from session_server.compaction.records import latest_record, make_compaction_event
from session_server.values.codec import encode_json, event_to_message
from session_server.values.context import build_working_context
from session_server.values.errors import CorruptRecordError
from session_server.values.events import SessionEvent
from session_server.values.tokens import count_messages, get_counter

from .sessions import SessionLog, tool_session

SYSTEM = ["You are a helpful agent."]


def _render(events: list[SessionEvent], record: dict[str, Any] | None) -> list[str]:
    ctx = build_compacted_context(events, record=record, system_instructions=SYSTEM)
    payload = workers_ai.to_model_messages(ctx.system_instructions, ctx.messages)
    return [encode_json(m) for m in payload["messages"]]


def test_without_record_it_matches_the_plain_builder() -> None:
    log = tool_session(3)
    ctx = build_compacted_context(log.events, record=None, system_instructions=SYSTEM)
    plain = build_working_context(log.events, system_instructions=SYSTEM)
    assert ctx.messages == plain.messages
    assert ctx.system_instructions == SYSTEM
    assert ctx.base_seq == log.events[-1].seq
    assert ctx.get_new_messages() == []


def test_compaction_events_are_never_messages() -> None:
    log = tool_session(4)
    rec = plan_compact(log.events, StrategyConfig(mode="compact"), force=True).record
    assert rec is not None
    log.compaction(rec, 8)
    ctx = build_compacted_context(log.events, record=latest_record(log.events))
    assert len(ctx.messages) == 16
    assert all(m.role != "system" for m in ctx.messages)
    assert ctx.base_seq == log.events[-1].seq  # the compaction event's seq
    assert ctx.metadata["compaction"] == {
        "strategy": "compact",
        "boundary_seq": rec["boundary_seq"],
        "placeholders": 2,
    }


def test_placeholders_apply_only_before_the_boundary() -> None:
    log = tool_session(5)
    rec = plan_compact(log.events, StrategyConfig(mode="compact"), force=True).record
    assert rec is not None
    ctx = build_compacted_context(log.events, record=rec)
    for msg, ev in zip(ctx.messages, log.events, strict=True):
        if ev.action == "tool_result" and ev.seq < rec["boundary_seq"]:
            assert msg.compacted and msg.content == output_placeholder(
                ev.tool_name or "", ev.tool_call_id or ""
            )
        else:
            assert not msg.compacted and msg.content == ev.content


def test_prefix_is_byte_identical_between_compactions_through_workers_ai() -> None:
    log = tool_session(6)
    rec = plan_compact(log.events, StrategyConfig(mode="compact"), force=True).record
    assert rec is not None
    log.compaction(rec)
    before = _render(log.events, latest_record(log.events))
    for i in range(7, 10):
        log.tool_turn(i)
    after = _render(log.events, latest_record(log.events))
    assert len(after) == len(before) + 12
    assert after[: len(before)] == before


def test_a_whole_session_only_changes_its_prefix_when_a_record_is_written() -> None:
    """Drive 40 turns through plan + build as the actor would; count prefix breaks."""
    cfg = StrategyConfig(mode="compact", compact_trigger_turns=6, compact_keep=2)
    log = SessionLog()
    previous: list[str] = []
    breaks = 0
    records = 0
    for i in range(1, 41):
        log.tool_turn(i)
        record = latest_record(log.events)
        plan = plan_compact(log.events, cfg, previous_record=record)
        if plan.record is not None:
            records += 1
            log.events.append(make_compaction_event(log.session_id, plan.record, plan.event_count))
            log.events[-1].seq = len(log.events)
            record = plan.record
        rendered = _render(log.events, record)
        if rendered[: len(previous)] != previous:
            breaks += 1
        previous = rendered
    assert records == breaks
    assert 5 <= records <= 10  # every ~5 turns, not on every request


def test_summarize_record_drops_older_events_and_adds_the_memory_block() -> None:
    log = tool_session(6)
    tail_seq = next(e.seq for e in log.events if e.turn == 3 and e.action == "user_message")
    record = {
        "strategy": "summarize",
        "episodic": [
            {
                "id": "ep_0001",
                "ts": 1.0,
                "turn_ids": ["turn_0001", "turn_0002"],
                "summary": "Looked at items 1 and 2.",
                "tags": [],
                "salience": 0.5,
            }
        ],
        "semantic": [
            {
                "id": "sem_0001",
                "ts": 1.0,
                "fact": "User likes short answers.",
                "tags": [],
                "confidence": 0.8,
                "salience": 0.8,
            }
        ],
        "tail_start_seq": tail_seq,
        "tail_start_turn": 3,
        "boundary_seq": tail_seq,
    }
    log.compaction(record)
    assert load_from_seq(record) == tail_seq
    ctx = build_compacted_context(log.events, record=record, system_instructions=SYSTEM)
    assert ctx.system_instructions == [
        SYSTEM[0],
        "[MEMORY:EPISODIC]\n1) Looked at items 1 and 2.\n\n"
        "[MEMORY:SEMANTIC]\n- User likes short answers.\n\n"
        f"{RECENT_HEADER}\nThe conversation continues below from turn_0003.",
    ]
    assert ctx.messages[0].content == "Question 3: please look into item 3."
    assert len(ctx.messages) == 16
    loaded = [e for e in log.events if e.seq >= tail_seq]
    assert build_compacted_context(loaded, record=record).messages == ctx.messages


def test_memory_block_limits_come_from_the_config() -> None:
    record = {
        "strategy": "summarize",
        "episodic": [{"id": f"ep_{i}", "summary": f"ep {i}"} for i in range(1, 6)],
        "semantic": [
            {"id": f"sem_{i}", "fact": f"fact {i}", "salience": i / 10} for i in range(1, 6)
        ],
        "tail_start_seq": 1,
        "tail_start_turn": 1,
    }
    cfg = StrategyConfig(max_episodic_items=2, max_semantic_items=3)
    block = build_compacted_context([], record=record, config=cfg).system_instructions[-1]
    assert "1) ep 4\n2) ep 5" in block and "ep 3" not in block
    assert "- fact 3\n- fact 4\n- fact 5" in block and "fact 2" not in block


def test_load_from_seq_without_memory_is_none() -> None:
    assert load_from_seq(None) is None
    assert load_from_seq({"strategy": "compact", "boundary_seq": 5, "params": {}}) is None


def test_orphan_results_are_dropped() -> None:
    log = SessionLog()
    log.user("a")
    log.call("c1", "search")
    log.result("c1", "search", "r")
    ctx = build_compacted_context(log.events[2:], record=None)
    assert ctx.messages == []


def test_token_count_is_set_on_request() -> None:
    log = tool_session(2)
    assert build_compacted_context(log.events, record=None).token_count is None
    ctx = build_compacted_context(log.events, record=None, count_tokens=True)
    assert ctx.token_count is not None and ctx.token_count > 0


@pytest.mark.parametrize(
    "record",
    [
        {"strategy": "bogus"},
        {"strategy": "summarize", "episodic": "x", "semantic": []},
        {
            "strategy": "summarize",
            "episodic": [],
            "semantic": [],
            "tail_start_seq": "3",
            "tail_start_turn": 1,
        },
        {"strategy": "compact", "boundary_seq": 2, "memory": 5},
    ],
)
def test_corrupt_records_are_reported(record: dict[str, Any]) -> None:
    with pytest.raises(CorruptRecordError, match="compaction record"):
        build_compacted_context(tool_session(1).events, record=record)


def test_stored_token_counts_are_used_and_placeholders_recounted() -> None:
    log = tool_session(5)
    counter = get_counter()
    for ev in log.events:
        msg = event_to_message(ev)
        assert msg is not None
        ev.token_count = counter.count_message(msg)
    rec = plan_compact(log.events, StrategyConfig(mode="compact"), force=True).record
    assert rec is not None
    ctx = build_compacted_context(
        log.events, record=rec, system_instructions=SYSTEM, count_tokens=True
    )
    assert ctx.token_count == count_messages(ctx.messages, SYSTEM).tokens
    # the stored counts really are what is summed: inflate the uncompacted ones
    for ev in log.events:
        ev.token_count = 1000
    inflated = build_compacted_context(log.events, record=rec, count_tokens=True)
    compacted = [m for m in inflated.messages if m.compacted]
    expected = 1000 * (len(inflated.messages) - len(compacted)) + count_messages(compacted).tokens
    assert inflated.token_count == expected
