from __future__ import annotations

import pytest

from session_server.compaction.builder import build_compacted_context, load_from_seq
from session_server.compaction.config import StrategyConfig
from session_server.compaction.memory import SemanticFact, memory_block, merge_semantic
from session_server.compaction.summarize import (
    SummaryResult,
    make_summary_record,
    plan_summarize,
    render_transcript,
)
from session_server.values.codec import encode_json
from session_server.values.errors import SummarizerError

from .sessions import SessionLog, tool_session

SUMMARIZE = StrategyConfig(mode="summarize")


def _user_seq(log: SessionLog, turn: int) -> int:
    return next(e.seq for e in log.events if e.turn == turn and e.action == "user_message")


def test_default_raw_tail_keeps_four_turns() -> None:
    log = tool_session(4)
    plan = plan_summarize(log.events, SUMMARIZE)
    assert plan.request is None and "raw_tail_turns=4" in plan.reason
    log.tool_turn(5)
    log.tool_turn(6)
    req = plan_summarize(log.events, SUMMARIZE).request
    assert req is not None
    assert req.turn_ids == ["turn_0001", "turn_0002"]
    assert req.tail_start_turn == 3 and req.tail_start_seq == _user_seq(log, 3)
    assert req.seq_range == [1, 8] and req.event_count == 8
    assert [len(t.events) for t in req.turns] == [4, 4]
    assert req.previous_episodic == [] and req.previous_semantic == []


@pytest.mark.parametrize("tail", [0, 1, 2, 5])
def test_raw_tail_turns_parameter(tail: int) -> None:
    log = tool_session(6)
    req = plan_summarize(log.events, StrategyConfig(raw_tail_turns=tail)).request
    assert req is not None
    assert len(req.turn_ids) == 6 - tail


def test_window_never_splits_a_turn_or_a_pending_call() -> None:
    log = tool_session(2)
    log.user("turn 3")
    log.call("pending", "search")  # no result yet
    for i in range(4, 9):
        log.tool_turn(i)
    req = plan_summarize(log.events, StrategyConfig(raw_tail_turns=2)).request
    assert req is not None
    assert req.turn_ids == ["turn_0001", "turn_0002"]  # turn 3 stays raw until answered
    assert req.tail_start_seq == _user_seq(log, 3)


def test_late_results_are_covered_with_their_turn() -> None:
    log = SessionLog()
    log.user("turn 1")
    log.call("c1", "search")
    log.user("turn 2")
    log.result("c1", "search", "late")
    for i in range(3, 7):
        log.tool_turn(i)
    req = plan_summarize(log.events, SUMMARIZE).request
    assert req is not None
    assert req.turn_ids == ["turn_0001", "turn_0002"]
    assert [e.action for e in req.turns[0].events] == [
        "user_message",
        "tool_call_request",
        "tool_result",
    ]


def test_record_holds_memory_window_and_reference_fields() -> None:
    log = tool_session(6)
    req = plan_summarize(log.events, SUMMARIZE).request
    assert req is not None
    result = SummaryResult(
        summary="Items 1 and 2 were fine.",
        facts=[SemanticFact("User tracks items.", ["user"], 0.7)],
        tags=["items"],
        salience=0.6,
    )
    rec = make_summary_record(req, result, SUMMARIZE, summarizer="test", now_ms=5000)
    encode_json(rec)
    assert rec["strategy"] == "summarize"
    assert rec["params"] == SUMMARIZE.to_dict()
    assert rec["turn_ids"] == ["turn_0001", "turn_0002"]
    assert rec["seq_range"] == [1, 8]
    assert rec["tail_start_seq"] == rec["boundary_seq"] == _user_seq(log, 3)
    assert rec["tail_start_turn"] == rec["boundary_turn"] == 3
    assert rec["episodic"] == [
        {
            "id": "ep_0001",
            "ts": 5.0,
            "turn_ids": ["turn_0001", "turn_0002"],
            "summary": "Items 1 and 2 were fine.",
            "tags": ["items"],
            "salience": 0.6,
            "sources": [{"session_id": "s1", "from_seq": 1, "to_seq": 8}],
        }
    ]
    assert rec["semantic"] == [
        {
            "id": "sem_0001",
            "ts": 5.0,
            "fact": "User tracks items.",
            "tags": ["user"],
            "confidence": 0.7,
            "salience": 0.7,
            "sources": [{"session_id": "s1", "from_seq": 1, "to_seq": 8}],
        }
    ]
    assert rec["added"] == {"episodic": ["ep_0001"], "semantic": ["sem_0001"]}
    # the reference keys, and ``sources`` beside them (readers of the layout ignore it)
    assert set(rec["episodic"][0]) == {
        "id",
        "ts",
        "turn_ids",
        "summary",
        "tags",
        "salience",
        "sources",
    }
    assert set(rec["semantic"][0]) == {
        "id",
        "ts",
        "fact",
        "tags",
        "confidence",
        "salience",
        "sources",
    }


def test_repeated_summarize_builds_on_the_previous_memory() -> None:
    log = tool_session(6)
    req1 = plan_summarize(log.events, SUMMARIZE).request
    assert req1 is not None
    rec1 = make_summary_record(
        req1,
        SummaryResult("first", [SemanticFact("A", ["x"], 0.5), SemanticFact("B")]),
        SUMMARIZE,
        now_ms=1000,
    )
    log.compaction(rec1, req1.event_count)
    # nothing new to summarise right after
    start = load_from_seq(rec1)
    assert start is not None
    window = [e for e in log.events if e.seq >= start]
    assert plan_summarize(window, SUMMARIZE, previous_record=rec1).request is None
    for i in range(7, 10):
        log.tool_turn(i)
    window = [e for e in log.events if e.seq >= start]
    req2 = plan_summarize(window, SUMMARIZE, previous_record=rec1).request
    assert req2 is not None
    assert req2.turn_ids == ["turn_0003", "turn_0004", "turn_0005"]
    assert req2.previous_episodic == rec1["episodic"]
    assert req2.previous_semantic == rec1["semantic"]
    assert req2.seq_range[0] == rec1["tail_start_seq"]
    rec2 = make_summary_record(
        req2,
        SummaryResult("second", [SemanticFact("A", ["y"], 0.9), SemanticFact("C")]),
        SUMMARIZE,
        now_ms=2000,
    )
    assert [e["summary"] for e in rec2["episodic"]] == ["first", "second"]
    assert [e["id"] for e in rec2["episodic"]] == ["ep_0001", "ep_0002"]
    assert [(s["id"], s["fact"]) for s in rec2["semantic"]] == [
        ("sem_0001", "A"),
        ("sem_0002", "B"),
        ("sem_0003", "C"),
    ]
    assert rec2["semantic"][0]["tags"] == ["x", "y"] and rec2["semantic"][0]["confidence"] == 0.9
    assert rec2["added"] == {"episodic": ["ep_0002"], "semantic": ["sem_0003"]}
    # only the latest record is needed to build the context
    ctx = build_compacted_context(log.events, record=rec2)
    block = ctx.system_instructions[-1]
    assert "1) first\n2) second" in block and "- A\n- B\n- C" in block
    assert ctx.messages[0].content.startswith("Question 6")


def test_unusable_results_are_refused() -> None:
    req = plan_summarize(tool_session(6).events, SUMMARIZE).request
    assert req is not None
    with pytest.raises(SummarizerError, match="summary"):
        make_summary_record(req, SummaryResult("   "), SUMMARIZE)
    with pytest.raises(SummarizerError, match=r"facts\[0\]\.confidence"):
        make_summary_record(req, SummaryResult("ok", [SemanticFact("f", [], 1.5)]), SUMMARIZE)


def test_merge_semantic_dedupes_by_fact_text() -> None:
    merged, added = merge_semantic(
        [
            {
                "id": "sem_0001",
                "fact": "Use  pnpm",
                "tags": ["a"],
                "confidence": 0.4,
                "salience": 0.4,
            }
        ],
        [
            SemanticFact("Use pnpm", ["b"], 0.8),
            SemanticFact("New"),
            SemanticFact("New"),
            SemanticFact(" "),
        ],
        ts=1.0,
    )
    assert added == ["sem_0002"]
    assert merged[0]["tags"] == ["a", "b"] and merged[0]["confidence"] == 0.8
    assert [m["fact"] for m in merged] == ["Use  pnpm", "New"]


def test_memory_block_format() -> None:
    block = memory_block(
        [{"summary": "one"}, {"summary": "two\nlines"}],
        [{"fact": "f1"}],
        max_episodic_items=3,
        max_semantic_items=20,
        tail_start_turn=12,
    )
    assert block == (
        "[MEMORY:EPISODIC]\n1) one\n2) two lines\n\n"
        "[MEMORY:SEMANTIC]\n- f1\n\n"
        "[RECENT TURNS]\nThe conversation continues below from turn_0012."
    )
    empty = memory_block([], [], max_episodic_items=3, max_semantic_items=20)
    assert empty == "[RECENT TURNS]\nThe conversation continues below."


def test_transcript_renders_every_kind_of_event() -> None:
    log = SessionLog()
    log.system("Be brief.")
    log.user("hello")
    log.call("c1", "search", "Looking.", q="x")
    log.result("c1", "search", "x" * 50, ok=False)
    log.answer("done")
    for i in range(2, 7):
        log.chat_turn(i)
    req = plan_summarize(log.events, SUMMARIZE).request
    assert req is not None
    text = render_transcript(req, max_chars=10)
    assert text.splitlines() == [
        "turn_0000:",
        "  System: Be brief.",
        "turn_0001:",
        "  User: hello",
        "  Assistant: Looking.",
        '  Tool call search (call_id=c1): {"q":"x"}',
        "  Tool error search (call_id=c1): xxxxxxxxxx…[40 more chars]",
        "  Assistant: done",
        "turn_0002:",
        "  User: Message 2",
        "  Assistant: Reply 2",
    ]
