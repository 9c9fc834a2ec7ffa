"""A failed summary's backoff outlives the actor (real registry and SQLite files, a
summarizer that always fails): after hibernation and reactivation the agent does not
call the summarizer again before its retry time, and the doubling goes on from where
it was. The registry keeps at most ``max_entries`` backoffs."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

from session_server import ActorRegistry, AgentActor
from session_server.compaction import SummaryRequest, SummaryResult
from session_server.runtime.summary_backoffs import SUMMARY_BACKOFF_MAX, SummaryBackoffs

from .test_actor_compaction import add_turn, fill

SUMMARIZE = {"mode": "summarize", "raw_tail_turns": 1}


class DownSummarizer:
    """A provider that is down: every call fails, and is counted."""

    name = "down"

    def __init__(self) -> None:
        self.calls = 0

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.calls += 1
        raise RuntimeError("provider down")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _pressure(actor: AgentActor, sid: str) -> None:
    """A turn whose reported prompt size raises the flag; the summary it primes ends."""
    ctx = await actor.build_working_context(sid, limit=1)
    add_turn(ctx, 99)
    result = await actor.persist_working_context(sid, ctx, usage={"prompt_tokens": 10**7})
    assert result.compaction_required
    await asyncio.gather(*actor.compactions._primers)


async def test_the_backoff_of_a_failed_summary_survives_hibernation(tmp_path: Path) -> None:
    down = DownSummarizer()
    clock = Clock()
    async with ActorRegistry(
        tmp_path, idle_timeout=None, summarizer=down, summary_backoff=60.0
    ) as reg:
        reg.summary_backoffs = SummaryBackoffs(60.0, clock=clock)
        actor = await reg.get("agent")
        sid = await actor.create_session()
        await actor.set_strategy(SUMMARIZE, sid)
        await fill(actor, sid, 4)
        await _pressure(actor, sid)
        assert down.calls == 1  # the primed summary failed: backing off for 60 s
        await actor.build_working_context(sid)  # the flag is still set: no new attempt
        assert down.calls == 1
        # The agent hibernates and its actor leaves memory; a new one serves the next call.
        await actor.hibernate()
        assert not actor.is_open
        del actor
        gc.collect()
        assert not reg.has_actor("agent")
        actor = await reg.get("agent")
        ctx = await actor.build_working_context(sid)
        assert down.calls == 1  # before: the new actor called the summarizer at once
        assert ctx.base_seq > 0
        # Past the retry time the summary is tried again, and the next wait is doubled.
        clock.now += 61
        await actor.build_working_context(sid)
        await asyncio.gather(*actor.compactions._summaries.values(), return_exceptions=True)
        assert down.calls == 2
        clock.now += 61
        await actor.build_working_context(sid)
        assert down.calls == 2  # 120 s this time
        clock.now += 60
        await actor.build_working_context(sid)
        await asyncio.gather(*actor.compactions._summaries.values(), return_exceptions=True)
        assert down.calls == 3


def test_backoffs_double_up_to_the_maximum_and_stay_bounded() -> None:
    clock = Clock()
    backoffs = SummaryBackoffs(1.0, max_entries=3, clock=clock)
    delays = [backoffs.failed("a", "s") for _ in range(12)]
    assert delays[:4] == [1.0, 2.0, 4.0, 8.0] and delays[-1] == SUMMARY_BACKOFF_MAX
    assert backoffs.backing_off("a", "s")
    clock.now += SUMMARY_BACKOFF_MAX
    assert not backoffs.backing_off("a", "s")
    backoffs.succeeded("a", "s")
    assert backoffs.failed("a", "s") == 1.0  # a success starts over
    for sid in ("t", "u", "v"):  # three more sessions: the oldest failure is forgotten
        backoffs.failed("b", sid)
    assert len(backoffs) == 3
    assert not backoffs.backing_off("a", "s")
    assert all(backoffs.backing_off("b", sid) for sid in ("t", "u", "v"))
    assert not backoffs.backing_off("c", "t")  # keyed by agent: another agent's session
