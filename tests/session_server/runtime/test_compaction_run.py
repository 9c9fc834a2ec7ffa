from __future__ import annotations

import pytest

from session_server.compaction.builder import build_compacted_context, load_from_seq
from session_server.compaction.config import StrategyConfig
from session_server.compaction.records import latest_record, make_compaction_event
from session_server.compaction.summarize import SummaryRequest, SummaryResult
from session_server.runtime.compaction_run import run_compaction
from session_server.values.errors import SummarizerError
from tests.session_server.compaction.sessions import tool_session


class FailingSummarizer:
    name = "failing"

    def __init__(self, exc: Exception) -> None:
        self.exc = exc
        self.calls = 0

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.calls += 1
        raise self.exc


async def test_mode_none_never_compacts() -> None:
    plan = await run_compaction(
        tool_session(10).events, StrategyConfig(), previous_record=None, force=True, pressure=True
    )
    assert plan.record is None and "mode is 'none'" in plan.reason


async def test_compact_mode_delegates_to_the_planner() -> None:
    plan = await run_compaction(
        tool_session(6).events, StrategyConfig(mode="compact"), previous_record=None, force=True
    )
    assert plan.record is not None and plan.strategy == "compact" and plan.items_removed == 4


async def test_summarize_needs_pressure_or_an_explicit_call() -> None:
    events = tool_session(8).events
    cfg = StrategyConfig(mode="summarize")
    idle = await run_compaction(events, cfg, previous_record=None)
    assert idle.record is None and "no summarize trigger" in idle.reason
    pressed = await run_compaction(events, cfg, previous_record=None, pressure=True, now_ms=1)
    assert pressed.record is not None and pressed.record["triggers"] == ["token_pressure"]
    assert pressed.record["summarizer"] == "extractive"
    assert pressed.event_count == 16
    assert pressed.tokens_after is not None and pressed.tokens_before is not None
    assert pressed.tokens_after < pressed.tokens_before
    assert pressed.record["tokens_after"] == pressed.tokens_after


async def test_nothing_to_summarise_says_so() -> None:
    plan = await run_compaction(
        tool_session(3).events, StrategyConfig(mode="summarize"), previous_record=None, force=True
    )
    assert plan.record is None and "nothing to summarise" in plan.reason


@pytest.mark.parametrize(
    "exc", [SummarizerError("model said no"), RuntimeError("bug"), ValueError("bad")]
)
async def test_summarizer_failure_raises_and_plans_nothing(exc: Exception) -> None:
    log = tool_session(8)
    before = list(log.events)
    failing = FailingSummarizer(exc)
    with pytest.raises(SummarizerError) as info:
        await run_compaction(
            log.events,
            StrategyConfig(mode="summarize"),
            previous_record=None,
            summarizer=failing,
            force=True,
        )
    assert failing.calls == 1
    assert log.events == before  # nothing appended, nothing changed
    if not isinstance(exc, SummarizerError):
        assert "'failing' failed" in str(info.value) and info.value.__cause__ is exc


async def test_actor_loop_with_repeated_summarize() -> None:
    """The actor's sequence: plan, append the event, load from the record, build."""
    log = tool_session(8)
    cfg = StrategyConfig(mode="summarize")
    record = None
    for round_ in range(3):
        start = load_from_seq(record)
        window = [e for e in log.events if start is None or e.seq >= start]
        plan = await run_compaction(window, cfg, previous_record=record, force=True)
        assert plan.record is not None
        event = make_compaction_event(log.session_id, plan.record, plan.event_count)
        log.compaction(event.compaction or {}, plan.event_count)
        record = latest_record(log.events)
        assert record == plan.record
        for i in range(3):
            log.tool_turn(100 + round_ * 10 + i)
    assert record is not None
    assert [e["id"] for e in record["episodic"]] == ["ep_0001", "ep_0002", "ep_0003"]
    start = load_from_seq(record)
    window = [e for e in log.events if start is None or e.seq >= start]
    ctx = build_compacted_context(window, record=record, system_instructions=["sys"])
    assert ctx.system_instructions[0] == "sys"
    assert ctx.system_instructions[1].startswith("[MEMORY:EPISODIC]\n1) ")
    users = [m for m in ctx.messages if m.role == "user"]
    assert len(users) == 4 + 3  # the raw tail plus the turns added since
