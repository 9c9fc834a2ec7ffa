"""Compaction through the actor: strategies, triggers, pressure, failures, metrics."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from session_server import ActorRegistry, AgentActor
from session_server.compaction import SummaryRequest, SummaryResult
from session_server.runtime.summarizers import ExtractiveSummarizer
from session_server.values.context import WorkingContext
from session_server.values.errors import InvalidParamsError, SummarizerError
from session_server.values.events import ContextMessage, SessionEvent, ToolCall
from session_server.values.tokens import get_counter

PLACEHOLDER = "⟦removed: tool output for lookup (call_id=call-{n}); reason=context_compaction⟧"


def add_turn(ctx: WorkingContext, n: int) -> None:
    ctx.add_message(ContextMessage(role="user", content=f"question {n}"))
    ctx.add_message(
        ContextMessage(
            role="assistant",
            tool_calls=[ToolCall(id=f"call-{n}", name="lookup", arguments={"n": n})],
        )
    )
    ctx.add_message(
        ContextMessage(
            role="tool", tool_call_id=f"call-{n}", name="lookup", content=f"big output {n} " * 40
        )
    )
    ctx.add_message(ContextMessage(role="assistant", content=f"answer {n}"))


async def fill(actor: AgentActor, sid: str, turns: int, start: int = 1) -> None:
    for n in range(start, start + turns):
        ctx = await actor.build_working_context(sid, limit=1)
        add_turn(ctx, n)
        await actor.persist_working_context(sid, ctx)


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[ActorRegistry]:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        yield reg


async def compactions(actor: AgentActor, sid: str) -> int:
    return len(await actor.load_events(sid, limit=None, actions=["compaction"]))


def tokens_of(ctx: WorkingContext) -> int:
    return get_counter().count_messages(ctx.messages, ctx.system_instructions).tokens


async def test_compact_replaces_old_tool_outputs_once(registry: ActorRegistry) -> None:
    actor = await registry.get("a")
    sid = await actor.create_session()
    await fill(actor, sid, 6)
    strategy = {"mode": "compact", "compact_keep": 2, "compact_trigger_turns": 3}
    ctx = await actor.build_working_context(sid, strategy=strategy)
    tools = [m for m in ctx.messages if m.role == "tool"]
    assert [m.compacted for m in tools] == [True, True, True, True, False, False]
    assert tools[0].content == PLACEHOLDER.format(n=1)
    assert tools[-1].content.startswith("big output 6")
    assert await compactions(actor, sid) == 1
    assert ctx.token_count == tokens_of(ctx)
    # the next request reuses the record: same prefix, byte for byte, and no new event
    again = await actor.build_working_context(sid, strategy=strategy)
    assert again.messages == ctx.messages
    assert await compactions(actor, sid) == 1
    # a new turn appends after the unchanged prefix
    await fill(actor, sid, 1, start=7)
    later = await actor.build_working_context(sid, strategy=strategy)
    assert later.messages[: len(ctx.messages)] == ctx.messages
    # raw events are never touched
    raw = await actor.load_events(sid, limit=None, actions=["tool_result"])
    assert raw[0].content.startswith("big output 1")


async def test_precedence_and_persisted_strategies(registry: ActorRegistry) -> None:
    actor = await registry.get("b")
    sid = await actor.create_session()
    assert (await actor.get_strategy(sid))["effective"]["mode"] == "none"
    await actor.set_strategy({"mode": "compact", "compact_keep": 5})  # agent default
    await actor.set_strategy({"compact_keep": 3}, session_id=sid)
    levels = await actor.get_strategy(sid)
    assert levels["agent"] == {"mode": "compact", "compact_keep": 5}
    assert levels["session"] == {"compact_keep": 3}
    assert levels["effective"]["mode"] == "compact"
    assert levels["effective"]["compact_keep"] == 3
    with pytest.raises(InvalidParamsError, match="compact_kep"):
        await actor.set_strategy({"compact_kep": 1}, session_id=sid)
    with pytest.raises(InvalidParamsError, match="compact_keep"):
        await actor.set_strategy({"compact_keep": -1}, session_id=sid)
    assert (await actor.get_strategy(sid))["session"] == {"compact_keep": 3}
    # the session level survives a restart of the actor (persisted in SQLite)
    await actor.hibernate()
    assert (await actor.get_strategy(sid))["effective"]["compact_keep"] == 3
    await actor.set_strategy(None, session_id=sid)
    assert (await actor.get_strategy(sid))["effective"]["compact_keep"] == 5


async def test_server_default_is_the_lowest_level(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, default_strategy={"compact_keep": 7}) as reg:
        actor = await reg.get("c")
        sid = await actor.create_session()
        assert (await actor.get_strategy(sid))["effective"]["compact_keep"] == 7
    with pytest.raises(ValueError, match="server strategy"):
        ActorRegistry(tmp_path, default_strategy={"bogus": 1})


async def test_token_pressure_summarizes_exactly_once(registry: ActorRegistry) -> None:
    actor = await registry.get("d")
    sid = await actor.create_session()
    await fill(actor, sid, 5)  # before the strategy: the server's own count fires nothing
    await actor.set_strategy(
        {"mode": "summarize", "raw_tail_turns": 2, "max_context_tokens": 1000}, session_id=sid
    )
    ctx = await actor.build_working_context(sid)
    add_turn(ctx, 6)
    result = await actor.persist_working_context(sid, ctx, usage={"prompt_tokens": 900})
    assert result.compaction_required is True
    # The summary started in the background at once; the build finds it (or waits for it).
    built = await actor.build_working_context(sid, system_instructions=["You help."])
    assert await compactions(actor, sid) == 1
    assert built.system_instructions[0] == "You help."
    block = built.system_instructions[-1]
    assert "[MEMORY:EPISODIC]" in block and "1) " in block and "[RECENT TURNS]" in block
    users = [m.content for m in built.messages if m.role == "user"]
    assert users == ["question 5", "question 6"]  # the raw tail
    assert built.token_count == tokens_of(built)
    # exactly once: the flag was cleared with the compaction
    await actor.build_working_context(sid)
    assert await compactions(actor, sid) == 1
    assert len(await actor.load_events(sid, limit=None)) == 6 * 4 + 1  # nothing deleted
    assert registry.metrics.compactions("summarize") == 1


async def test_low_usage_sets_no_flag_and_bad_usage_is_refused(registry: ActorRegistry) -> None:
    actor = await registry.get("e")
    sid = await actor.create_session()
    ctx = await actor.build_working_context(sid)
    add_turn(ctx, 1)
    result = await actor.persist_working_context(sid, ctx, usage={"prompt_tokens": 10})
    assert result.compaction_required is False
    again = await actor.build_working_context(sid)
    again.add_message(ContextMessage(role="user", content="x"))
    with pytest.raises(InvalidParamsError, match="prompt_tokens"):
        await actor.persist_working_context(sid, again, usage={"prompt_tokens": "many"})
    assert len(await actor.load_events(sid)) == 4


class FailingSummarizer:
    name = "failing"

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        raise RuntimeError("provider down")


async def test_summarizer_failure_writes_nothing(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, summarizer=FailingSummarizer()) as reg:
        actor = await reg.get("f")
        sid = await actor.create_session()
        await fill(actor, sid, 6)
        before = await actor.load_events(sid, limit=None)
        with pytest.raises(SummarizerError, match="provider down"):
            await actor.compact(sid, strategy={"mode": "summarize", "raw_tail_turns": 2})
        assert await actor.load_events(sid, limit=None) == before


async def test_explicit_compact_with_nothing_to_do_says_so(registry: ActorRegistry) -> None:
    actor = await registry.get("g")
    sid = await actor.create_session()
    await fill(actor, sid, 1)
    out: dict[str, Any] = await actor.compact(sid, strategy={"mode": "summarize"})
    assert out["compacted"] is False and out["reason"]
    assert await compactions(actor, sid) == 0
    done = await actor.compact(sid, strategy={"mode": "compact", "compact_keep": 0})
    assert done["compacted"] is True and done["items_removed"] == 1
    assert registry.metrics.compactions("compact") == 1


async def test_first_build_after_activation_keeps_the_summary_memory_block(
    tmp_path: Path,
) -> None:
    """The snapshot shortcut of the first build must not drop the memory block."""
    instructions = ["You are terse."]
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("a")
        sid = await actor.create_session()
        await fill(actor, sid, 4)
        out = await actor.compact(sid, strategy={"mode": "summarize", "raw_tail_turns": 1})
        assert out["compacted"] is True
        ctx = await actor.build_working_context(sid, system_instructions=instructions)
        add_turn(ctx, 5)
        await actor.persist_working_context(sid, ctx)
        expected = await actor.build_working_context(
            sid, system_instructions=instructions, limit=200
        )
    assert any("[MEMORY:EPISODIC]" in s for s in expected.system_instructions)
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("a")
        first = await actor.build_working_context(sid, system_instructions=instructions)
    assert first.system_instructions == expected.system_instructions
    assert first.messages == expected.messages
    assert first.token_count == expected.token_count


async def test_snapshot_serves_the_first_build_when_instructions_match(tmp_path: Path) -> None:
    instructions = ["You are terse."]
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("a")
        sid = await actor.create_session()
        ctx = await actor.build_working_context(sid, system_instructions=instructions)
        add_turn(ctx, 1)
        await actor.persist_working_context(sid, ctx)
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("a")
        same = await actor.build_working_context(sid, system_instructions=instructions)
    assert same.metadata.get("restored_from") == "working_context_snapshot.json"
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("a")
        other = await actor.build_working_context(sid, system_instructions=["Other."])
    assert "restored_from" not in (other.metadata or {})
    assert other.system_instructions == ["Other."]
    assert [m.content for m in other.messages] == [m.content for m in same.messages]


class GatedSummarizer:
    """The extractive summarizer, held until ``release`` is set (``started`` says a
    summary began): a summary still running while a delete commits."""

    name = "gated"

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.inner = ExtractiveSummarizer()

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.started.set()
        await self.release.wait()
        return await self.inner.summarize(request)


@pytest.mark.parametrize("how", ["delete", "clear"])
async def test_a_summary_read_before_a_delete_is_not_written_after_it(
    tmp_path: Path, how: str
) -> None:
    """Issue 33, item 3: the summary of a message deleted while the summary ran would
    bring the deleted text back (record, memory block, episodic and semantic files)."""
    secret = "my name is SECRET-IN-SUMMARY"
    gate = GatedSummarizer()
    strategy = {"mode": "summarize", "raw_tail_turns": 1}
    async with ActorRegistry(tmp_path, idle_timeout=None, summarizer=gate) as reg:
        actor = await reg.get("s")
        sid = await actor.create_session()
        await actor.append_events(sid, [SessionEvent(content=secret)])
        await fill(actor, sid, 4)
        victim = (await actor.load_events(sid, limit=1, tail=False))[0]
        assert victim.content == secret
        running = asyncio.create_task(actor.compact(sid, strategy=strategy))
        await gate.started.wait()
        if how == "delete":
            assert await actor.delete_events(sid, [victim.id]) == 1
        else:
            assert await actor.clear_session(sid) > 0
        gate.release.set()
        out = await running
        assert out["compacted"] is False and "removed" in out["reason"]
        events = await actor.load_events(sid, limit=None)
        assert "SECRET" not in json.dumps([msgspec.to_builtins(e) for e in events])
        ctx = await actor.build_working_context(sid, strategy=strategy)
        assert "SECRET" not in json.dumps([m.content for m in ctx.messages])
        if how == "delete":  # what is left is summarised by the next compaction
            again = await actor.compact(sid, strategy=strategy)
            assert again["compacted"] is True
        await actor.mirror.drain()
        folder = tmp_path / "agents" / "s" / "sessions" / sid
        # A cleared session whose mirror was never written has no folder: nothing to hold.
        for path in folder.iterdir() if folder.exists() else ():
            assert b"SECRET" not in path.read_bytes(), path.name
