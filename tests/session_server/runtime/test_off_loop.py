"""Blocking file work in request paths runs on worker threads, not on the event loop.

Each test wraps the real file function (it still does its work) to record the thread it
ran on, drives a real request path, and checks the thread was one of the registry's
workers.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from websockets.asyncio.client import connect as ws_connect

from session_server import ActorRegistry, AgentActor
from session_server.client import SessionClient
from session_server.compaction.config import StrategyConfig
from session_server.compaction.summarize import SummaryRequest, SummaryResult
from session_server.concurrency.worker_threads import WorkerThreads
from session_server.core import decisions
from session_server.core.agent_core import AgentCore
from session_server.core.decisions import LARGE_WINDOW_EVENTS
from session_server.mirror.rows_file import ROWS_FILE
from session_server.mirror_io.snapshot_index import SnapshotIndex
from session_server.mirror_io.writer import MirrorWriter
from session_server.rpc import memory_methods
from session_server.runtime import actor as actor_module
from session_server.runtime import (
    compaction_run,
    compaction_turns,
    mirror_link,
    off_loop,
    transfer,
)
from session_server.runtime import plan_size as plan_size_module
from session_server.runtime.off_loop import (
    LARGE_CONTENT_CHARS,
    OFF_LOOP_EVENTS,
    instructions_counted,
)
from session_server.runtime.plan_size import ITEM_CHARS
from session_server.runtime.summarizers import ExtractiveSummarizer
from session_server.values import tokens
from session_server.values.events import ContextMessage, SessionEvent, ToolCall
from session_server.values.tokens import TokenCounter, get_counter
from tests.support.server import running_server

WORKER_PREFIX = "session-server-sqlite"
COMPACT = {"mode": "compact", "compact_keep": 2, "compact_trigger_turns": 4}


@pytest.fixture
def threads() -> Iterator[dict[str, list[str]]]:
    seen: dict[str, list[str]] = {}
    yield seen


def recording(
    monkeypatch: pytest.MonkeyPatch, module: Any, name: str, seen: dict[str, list[str]]
) -> None:
    original: Callable[..., Any] = getattr(module, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        seen.setdefault(name, []).append(threading.current_thread().name)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapped)


async def one_turn(actor: AgentActor, text: str) -> str:
    """A new session holding one persisted user message; its id."""
    sid = await actor.create_session()
    ctx = await actor.build_working_context(sid)
    ctx.add_messages([ContextMessage(role="user", content=text)])
    await actor.persist_working_context(sid, ctx)
    return sid


def on_workers(names: list[str]) -> bool:
    return bool(names) and all(n.startswith(WORKER_PREFIX) for n in names)


async def test_snapshot_restore_reads_the_file_on_a_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: dict[str, list[str]]
) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("agent")
        sid = await one_turn(actor, "q")
    recording(monkeypatch, mirror_link, "load_snapshot_cache", threads)
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        restored = await (await reg.get("agent")).build_working_context(sid)
    assert restored.metadata.get("restored_from") == "working_context_snapshot.json"
    assert on_workers(threads["load_snapshot_cache"]), threads


async def test_export_and_import_touch_files_on_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: dict[str, list[str]]
) -> None:
    recording(monkeypatch, transfer, "write_export", threads)
    recording(monkeypatch, transfer, "import_reference_folder", threads)
    recording(monkeypatch, transfer, "read_rows_file", threads)
    recording(monkeypatch, transfer, "with_new_ids", threads)
    recording(monkeypatch, actor_module, "check_rows", threads)
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("agent")
        sid = await one_turn(actor, "q")
        exported = await transfer.export_files(actor, sid)
        # A copy beside the original (lossless, fresh ids), then the reference files alone.
        imported = await transfer.import_files(actor, exported["files"], new_ids=True)
        assert imported["event_count"] == 1 and imported["lossless"]
        reference = {k: v for k, v in exported["files"].items() if k != ROWS_FILE}
        assert (await transfer.import_files(actor, reference))["event_count"] == 1
    assert on_workers(threads["write_export"]), threads
    assert on_workers(threads["read_rows_file"]), threads
    assert on_workers(threads["import_reference_folder"]), threads
    # Linear in the rows (an event decoded each): a session of 10,000 events is not
    # renumbered or checked on the event loop.
    assert on_workers(threads["with_new_ids"]) and on_workers(threads["check_rows"]), threads


async def test_memory_view_and_snapshot_index_read_on_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: dict[str, list[str]]
) -> None:
    recording(monkeypatch, memory_methods, "read_memory_view", threads)
    recording(monkeypatch, SnapshotIndex, "summaries", threads)
    async with running_server(tmp_path / "memory") as server:
        async with SessionClient(server.url, "agent") as client:
            sid = await client.create_session()
            await client.persist_turn(sid, [ContextMessage(role="user", content="q")])
            view = await client.call("memory.view", {"session_id": sid})
            assert view
        async with SessionClient(server.url, None) as admin:
            await admin.call("memory.list_snapshots", {})
    assert on_workers(threads["read_memory_view"]), threads
    assert on_workers(threads["summaries"]), threads


async def test_agents_list_reads_the_folders_on_a_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: dict[str, list[str]]
) -> None:
    recording(monkeypatch, ActorRegistry, "list_agents", threads)
    async with running_server(tmp_path / "memory") as server:
        async with SessionClient(server.url, "agent") as client:
            await client.create_session()
        async with SessionClient(server.url, None) as admin:
            assert await admin.list_agents() == ["agent"]
    assert on_workers(threads["list_agents"]), threads


async def test_turn_tokens_are_counted_on_the_commit_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: dict[str, list[str]]
) -> None:
    """tiktoken releases the GIL: a persist's and an append's events are counted on the
    worker thread that commits them, and the stored counts are those of each event."""
    recording(monkeypatch, TokenCounter, "count_event", threads)
    async with ActorRegistry(tmp_path, idle_timeout=None, mirror=False) as reg:
        actor = await reg.get("agent")
        sid = await actor.create_session()
        ctx = await actor.build_working_context(sid)
        ctx.add_messages(
            [
                ContextMessage(role="user", content="how many tokens is this?"),
                ContextMessage(role="assistant", content="", tool_calls=[ToolCall("c1", "t")]),
                ContextMessage(role="tool", content="a result", tool_call_id="c1", name="t"),
            ]
        )
        await actor.persist_working_context(sid, ctx)
        await actor.append_events(sid, [SessionEvent(action="agent_message", content="done")])
        stored = await actor.load_events(sid, limit=None)
    assert len(threads["count_event"]) == 4
    assert on_workers(threads["count_event"]), threads
    counter = get_counter()
    assert [e.token_count for e in stored] == [counter.count_event(e) for e in stored]
    assert all(e.token_count for e in stored)


@pytest.mark.parametrize(
    "where",
    ["content", "arguments", "list arguments", "tuple of calls", "calls as objects", "object"],
)
async def test_a_large_turn_under_a_compacting_strategy_is_counted_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: dict[str, list[str]], where: str
) -> None:
    """A compacting strategy checks the turn's size before the commit: a large turn (in
    its content or in a tool call's arguments: an object, an array, or the calls or the
    message given by a local caller as a tuple or objects, all accepted) is counted
    once, when it is prepared on
    a worker, not on the event loop (4 MB counted there stalled every client for 110
    ms), and the commit stores those counts."""
    big = "word " * (LARGE_CONTENT_CHARS // 5 + 10)
    messages: list[Any]
    if where == "content":
        messages = [ContextMessage(role="user", content=big)]
    elif where == "object":
        messages = [{"role": "user", "content": big}]
    else:
        arguments: Any = [big] if where == "list arguments" else {"text": big}
        calls: Any = [ToolCall("c1", "t", arguments=arguments)]
        if where == "tuple of calls":
            calls = tuple(calls)
        elif where == "calls as objects":
            calls = [msgspec.structs.asdict(call) for call in calls]
        messages = [ContextMessage(role="assistant", content="", tool_calls=calls)]
    recording(monkeypatch, TokenCounter, "count_event", threads)
    async with ActorRegistry(tmp_path, idle_timeout=None, mirror=False) as reg:
        actor = await reg.get("agent")
        sid = await actor.create_session()
        await actor.set_strategy(COMPACT, sid)
        ctx = await actor.build_working_context(sid)
        ctx.add_messages(messages)
        await actor.persist_working_context(sid, ctx)
        stored = await actor.load_events(sid, limit=None)
    assert len(threads["count_event"]) == 1  # counted once, for the check and the commit
    assert on_workers(threads["count_event"]), threads
    assert [e.token_count for e in stored] == [get_counter().count_event(e) for e in stored]


@pytest.mark.parametrize("chars", [LARGE_CONTENT_CHARS, 4 * 1024 * 1024])
async def test_large_system_instructions_are_counted_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chars: int
) -> None:
    """A build reports the context's tokens and a persist under a compacting strategy
    checks them: a large new system instruction (remembered after, or too large to be:
    4 Mi characters) is counted on a worker, never on the event loop (4 MB counted there
    stalled every client for 180 ms on every build); the counts equal those counted on
    the loop."""
    prompt = ("word " * (chars // 5 + 1))[:chars]
    seen: list[str] = []  # the thread of each count of the prompt
    original = TokenCounter.count

    def count(self: TokenCounter, text: str) -> int:
        if text is prompt:
            seen.append(threading.current_thread().name)
        return original(self, text)

    monkeypatch.setattr(TokenCounter, "count", count)
    async with ActorRegistry(tmp_path, idle_timeout=None, mirror=False) as reg:
        actor = await reg.get("agent")
        sid = await actor.create_session()
        await actor.set_strategy(COMPACT, sid)
        ctx = await actor.build_working_context(sid, system_instructions=[prompt])
        builds = len(seen)
        ctx.add_messages([ContextMessage(role="user", content="hi")])
        await actor.persist_working_context(sid, ctx)
        again = await actor.build_working_context(sid, system_instructions=[prompt])
    assert builds == 1
    # Remembered after the first count; else counted by each request (and by the
    # background build the persist's pressure flag starts), off the loop each time.
    remembered = chars <= tokens.INSTRUCTION_CACHE_CHARS // 4
    assert on_workers(seen) and (len(seen) == 1 if remembered else len(seen) >= 3), seen
    counter = get_counter()
    expected = original(counter, prompt) + tokens.MESSAGE_OVERHEAD
    assert ctx.token_count == expected
    hi = counter.count_message(ContextMessage(role="user", content="hi"))
    assert again.token_count == expected + hi
    assert counter._pinned == {}


async def test_mirror_writes_run_on_the_mirror_threads_not_the_sqlite_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: dict[str, list[str]]
) -> None:
    """Callers wait for commits, nobody waits for the mirror: its file I/O has threads of
    its own, so a burst of mirror writes never holds a thread a commit waits for."""
    recording(monkeypatch, MirrorWriter, "append", threads)
    recording(monkeypatch, MirrorWriter, "write_snapshot", threads)
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("agent")
        await one_turn(actor, "hello")
        await actor.mirror.drain()
    names = threads["append"] + threads["write_snapshot"]
    assert threads["append"] and threads["write_snapshot"], threads
    assert all(n.startswith("session-server-mirror") for n in names), threads


def prompt_counts(monkeypatch: pytest.MonkeyPatch, prompts: list[str]) -> list[str]:
    """The thread of each ``TokenCounter.count`` of one of ``prompts`` (by identity)."""
    seen: list[str] = []
    ids = {id(p) for p in prompts}
    original = TokenCounter.count

    def count(self: TokenCounter, text: str) -> int:
        if id(text) in ids:
            seen.append(threading.current_thread().name)
        return original(self, text)

    monkeypatch.setattr(TokenCounter, "count", count)
    return seen


async def test_instructions_counted_ahead_stay_counted_for_the_whole_block(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Within an ``instructions_counted`` block no instruction of the request is counted
    on the loop, even when (1) the counts taken ahead are more than the counter's cache
    holds (its entries bound: remembering the last emptied it of the others), or (2) a
    concurrent request that had pinned the same large text ends its block first."""
    get_counter()
    many = [
        f"rule {i}: " + "be brief and exact. " * 10
        for i in range(tokens.INSTRUCTION_CACHE_ENTRIES + 1)
    ]
    huge = "word " * (tokens.INSTRUCTION_CACHE_CHARS // 4 // 5 + 1)  # too large to remember
    seen = prompt_counts(monkeypatch, [*many, huge])
    counter = get_counter()
    with WorkerThreads(1, thread_name_prefix=WORKER_PREFIX) as pool:
        async with instructions_counted(pool, many):
            counts = [counter.count_instruction(text) for text in many]
        assert on_workers(seen) and len(seen) == len(many), seen
        first = instructions_counted(pool, [huge])
        await first.__aenter__()
        second = instructions_counted(pool, [huge])  # the same text, meanwhile
        async with second:
            await first.__aexit__(None, None, None)
            huge_count = counter.count_instruction(huge)
    assert on_workers(seen), seen
    assert counts == [counter.count(t) for t in many]
    assert huge_count == counter.count(huge)
    assert counter._pinned == {}


def turn(question: str, answer: str) -> list[ContextMessage]:
    return [
        ContextMessage(role="user", content=question),
        ContextMessage(role="assistant", content=answer),
    ]


class GatedSummarizer(ExtractiveSummarizer):
    """The extractive summary, once ``gate`` is set (a summary slower than the build)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        await self.gate.wait()
        return await super().summarize(request)


async def test_compactions_count_large_instructions_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compaction counts the context before and after it with the request's system
    instructions: an explicit one (``memory.compact``) and a background summary that
    outlives the build which started it (the build's counts taken ahead are gone by
    then) count a large instruction on a worker, not on the event loop."""
    prompt = "word " * (tokens.INSTRUCTION_CACHE_CHARS // 4 // 5 + 1)  # too large to remember
    summarize = {"mode": "summarize", "raw_tail_turns": 1}
    summarizer = GatedSummarizer()
    async with ActorRegistry(
        tmp_path, idle_timeout=None, mirror=False, summarizer=summarizer, compaction_wait=0.001
    ) as reg:
        actor = await reg.get("agent")
        sid = await actor.create_session()
        for n in range(4):
            ctx = await actor.build_working_context(sid)
            ctx.add_messages(turn(f"q{n}", f"a{n}"))
            await actor.persist_working_context(sid, ctx)
        seen = prompt_counts(monkeypatch, [prompt])
        summarizer.gate.set()
        out = await actor.compact(sid, strategy=summarize, system_instructions=[prompt])
        assert out["compacted"] is True and seen and on_workers(seen), seen
        summarizer.gate.clear()
        await actor.set_strategy({**summarize, "max_context_tokens": 1000}, sid)
        ctx = await actor.build_working_context(sid, system_instructions=[prompt])
        ctx.add_messages(turn("q", "a") * 2)
        await actor.persist_working_context(sid, ctx)  # under pressure: a summary starts
        seen.clear()
        await actor.build_working_context(sid, system_instructions=[prompt])  # "slow"
        summary = actor.compactions._summaries[sid]
        await asyncio.gather(*actor.compactions._primers)
        summarizer.gate.set()
        assert await summary in ("written", "nothing")  # it ran to its end
    assert seen and on_workers(seen), seen
    assert get_counter()._pinned == {}  # every pin released


async def test_a_persist_whose_usage_reports_no_prompt_size_counts_instructions_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``usage`` without a prompt size (no key the server reads: only output tokens)
    leaves the size check to the server's own count, instructions included: a large
    one is counted on a worker then too, not on the event loop."""
    prompt = "word " * (tokens.INSTRUCTION_CACHE_CHARS // 4 // 5 + 1)  # too large to remember
    async with ActorRegistry(tmp_path, idle_timeout=None, mirror=False) as reg:
        actor = await reg.get("agent")
        sid = await actor.create_session()
        await actor.set_strategy(COMPACT, sid)
        ctx = await actor.build_working_context(sid, system_instructions=[prompt])
        ctx.add_messages(turn("q", "a"))
        seen = prompt_counts(monkeypatch, [prompt])
        await actor.persist_working_context(sid, ctx, usage={"completion_tokens": 5})
    assert seen and on_workers(seen), seen


async def test_concurrent_builds_with_one_large_instruction_pin_and_release_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight builds at once with the same large new instruction, the slower half
    cancelled wherever they are when the first one answers: none counts it on the loop,
    those that answer report the same count, and no pin outlives them."""
    prompt = "word " * (tokens.INSTRUCTION_CACHE_CHARS // 4 // 5 + 1)  # too large to remember
    async with ActorRegistry(tmp_path, idle_timeout=None, mirror=False) as reg:
        actor = await reg.get("agent")
        sid = await actor.create_session()
        seen = prompt_counts(monkeypatch, [prompt])
        builds = [
            asyncio.ensure_future(actor.build_working_context(sid, system_instructions=[prompt]))
            for _ in range(8)
        ]
        await asyncio.wait(builds, return_when=asyncio.FIRST_COMPLETED)
        for task in builds[4:]:
            task.cancel()
        done = await asyncio.gather(*builds, return_exceptions=True)
    answered = [ctx.token_count for ctx in done if not isinstance(ctx, BaseException)]
    assert len(answered) >= 4 and len(set(answered)) == 1, done
    assert seen and on_workers(seen), sorted(set(seen))
    assert answered[0] == get_counter().count(prompt) + tokens.MESSAGE_OVERHEAD
    assert get_counter()._pinned == {}


async def test_many_small_items_are_planned_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: dict[str, list[str]]
) -> None:
    """Planning is linear in the items too, not only in their characters: 10,000 small
    events were planned on the event loop in 27-57 ms. Past ``LARGE_CONTENT_CHARS /
    ITEM_CHARS`` items, an append and a turn are planned (and counted) on a worker; a
    turn of a few small messages stays on the loop."""
    many = LARGE_CONTENT_CHARS // ITEM_CHARS
    recording(monkeypatch, AgentCore, "plan_events", threads)
    recording(monkeypatch, AgentCore, "prepare_turn", threads)
    async with ActorRegistry(tmp_path, idle_timeout=None, mirror=False) as reg:
        actor = await reg.get("agent")
        sid = await actor.create_session()
        await actor.append_events(sid, [SessionEvent(content=f"e{i}") for i in range(many)])
        await actor.append_events(sid, [SessionEvent(content="one")])
        ctx = await actor.build_working_context(sid)
        ctx.add_messages([ContextMessage(role="user", content=f"m{i}") for i in range(many)])
        await actor.persist_working_context(sid, ctx)
        ctx = await actor.build_working_context(sid)
        ctx.add_messages([ContextMessage(role="user", content="small")])
        await actor.persist_working_context(sid, ctx)
        stored = await actor.load_events(sid, limit=None)
    assert len(stored) == 2 * many + 2
    planned, prepared = threads["plan_events"], threads["prepare_turn"]
    assert on_workers(planned[:1]) and on_workers(prepared[:1]), threads
    assert not on_workers(planned[1:]) and not on_workers(prepared[1:]), threads
    assert [e.token_count for e in stored] == [get_counter().count_event(e) for e in stored]


async def test_an_import_of_many_events_is_planned_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: dict[str, list[str]]
) -> None:
    """``import_events`` (an export folder without its rows file) plans its events as an
    append does: past ``LARGE_CONTENT_CHARS / ITEM_CHARS`` items on a worker (a reference
    folder of 10,000 events was validated and numbered on the event loop), a small one
    on the loop; the stored counts are the counter's either way."""
    many = LARGE_CONTENT_CHARS // ITEM_CHARS
    recording(monkeypatch, AgentCore, "plan_events", threads)
    async with ActorRegistry(tmp_path, idle_timeout=None, mirror=False) as reg:
        actor = await reg.get("agent")
        big, result = await actor.import_events(
            [SessionEvent(content=f"e{i}") for i in range(many)]
        )
        small, _ = await actor.import_events([SessionEvent(content="one")])
        stored = await actor.load_events(big, limit=None)
        stored += await actor.load_events(small, limit=None)
    assert result.last_seq == many and len(stored) == many + 1
    planned = threads["plan_events"]
    assert on_workers(planned[:1]) and not on_workers(planned[1:]), threads
    assert [e.token_count for e in stored] == [get_counter().count_event(e) for e in stored]


async def test_a_turn_over_rpc_is_weighed_by_its_frame(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: dict[str, list[str]]
) -> None:
    """The RPC layer bounds a turn's characters by its frame's size: a small turn is
    planned on the loop without a walk of its text, a large one still on a worker (the
    frame is large too, so its characters are counted)."""
    walks: list[int] = []
    content_chars = plan_size_module._content_chars

    def counted(items: Any) -> int:
        walks.append(len(items))
        return content_chars(items)

    monkeypatch.setattr(plan_size_module, "_content_chars", counted)
    recording(monkeypatch, AgentCore, "prepare_turn", threads)
    big = "word " * (LARGE_CONTENT_CHARS // 5 + 10)
    async with (
        running_server(tmp_path / "memory") as running,
        SessionClient(running.url, "agent") as client,
    ):
        await client.create_session(session_id="s")
        await client.persist_turn("s", [ContextMessage(role="user", content="small")])
        assert walks == [] and not on_workers(threads["prepare_turn"]), threads
        await client.persist_turn("s", [ContextMessage(role="user", content=big)])
        assert walks == [1] and on_workers(threads["prepare_turn"][1:]), threads
        stored = await client.load_events("s", limit=None)
    assert [e.content for e in stored] == ["small", big]


async def test_a_large_turn_in_a_batch_is_counted_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: dict[str, list[str]]
) -> None:
    """Each item of a batch is weighed by the whole frame's size: a large turn inside a
    batch is prepared and counted on a worker, as it is alone (a review found the batch's
    running answer size passed instead, which made every batched turn look small)."""
    recording(monkeypatch, TokenCounter, "count_event", threads)
    big = "word " * (LARGE_CONTENT_CHARS // 5 + 10)
    persist = {"session_id": "s", "messages": [{"role": "user", "content": big}]}
    async with running_server(tmp_path / "memory") as running:
        async with SessionClient(running.url, "agent") as client:
            await client.create_session(session_id="s")
        async with ws_connect(f"{running.url}/v1/agents/agent", max_size=None) as ws:
            await ws.send(
                json.dumps(
                    [
                        {"jsonrpc": "2.0", "id": 1, "method": "memory.set_strategy",
                         "params": {"session_id": "s", "strategy": COMPACT}},
                        {"jsonrpc": "2.0", "id": 2, "method": "turn.persist", "params": persist},
                    ]
                )
            )  # fmt: skip
            answers = json.loads(await ws.recv())
    assert [a.get("error") for a in answers] == [None, None], answers
    assert len(threads["count_event"]) == 1 and on_workers(threads["count_event"]), threads


class RecordingSummarizer(ExtractiveSummarizer):
    """The extractive summary, recording the thread each ``summarize_sync`` ran on."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: list[str] = []
        self.requests: list[SummaryRequest] = []

    def summarize_sync(self, request: SummaryRequest) -> SummaryResult:
        self.threads.append(threading.current_thread().name)
        self.requests.append(request)
        return super().summarize_sync(request)

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        return self.summarize_sync(request)


class EnteredGate(GatedSummarizer):
    """``GatedSummarizer`` that says when its ``summarize`` was entered."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = asyncio.Event()

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.entered.set()
        return await super().summarize(request)


def qa_events(pairs: int) -> list[SessionEvent]:
    """``pairs`` turns of a user question and an agent answer."""
    return [
        SessionEvent(action=action, content=f"{action} {i}")
        for i in range(pairs)
        for action in ("user_message", "agent_message")
    ]


async def test_a_summary_of_a_long_session_is_planned_and_made_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: dict[str, list[str]]
) -> None:
    """A summarize compaction is linear in the session (a summary of 200k events held
    the event loop for seconds): past ``OFF_LOOP_EVENTS`` events its plan, the summary
    of a summarizer that offers ``summarize_sync``, the record's token counts and the
    freeing of the events it read run on the registry's workers."""
    recording(monkeypatch, compaction_run, "plan_summarize", threads)
    recording(monkeypatch, compaction_run, "build_parts", threads)
    recording(monkeypatch, compaction_turns, "free_in_steps", threads)
    summarizer = RecordingSummarizer()
    async with ActorRegistry(
        tmp_path, idle_timeout=None, mirror=False, summarizer=summarizer
    ) as reg:
        actor = await reg.get("agent")
        sid = await actor.create_session()
        await actor.append_events(sid, qa_events(OFF_LOOP_EVENTS // 2 + 1))
        out = await actor.compact(sid, strategy={"mode": "summarize"})
    assert out["compacted"] is True, out
    assert on_workers(threads["plan_summarize"]), threads
    assert on_workers(threads["build_parts"]) and len(threads["build_parts"]) == 2, threads
    assert on_workers(summarizer.threads), summarizer.threads
    # The session's events read for it are freed on a worker too, a slice at a time.
    assert on_workers(threads["free_in_steps"]), threads


async def test_a_summarizer_overriding_summarize_alone_is_awaited_as_it_is(
    tmp_path: Path,
) -> None:
    """A subclass that overrides ``summarize`` only (here a gate) is awaited: its
    inherited ``summarize_sync`` would skip what it added."""
    summarizer = EnteredGate()
    async with ActorRegistry(
        tmp_path, idle_timeout=None, mirror=False, summarizer=summarizer
    ) as reg:
        actor = await reg.get("agent")
        sid = await actor.create_session()
        await actor.append_events(sid, qa_events(OFF_LOOP_EVENTS // 2 + 1))
        compaction = asyncio.ensure_future(actor.compact(sid, strategy={"mode": "summarize"}))
        await asyncio.wait_for(summarizer.entered.wait(), 60)  # its ``summarize`` ran
        assert not compaction.done()  # and waits at its gate
        summarizer.gate.set()
        assert (await compaction)["compacted"] is True


async def test_a_context_of_a_large_window_is_built_off_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: dict[str, list[str]]
) -> None:
    """A build of ``LARGE_WINDOW_EVENTS`` events or more (the core's ``ContextDraft``) is
    made on a worker (100k events held the loop for hundreds of milliseconds); a small
    window is still built at once, on the loop. The two give the same context."""
    recording(monkeypatch, decisions, "build_compacted_context", threads)
    count = LARGE_WINDOW_EVENTS + 10
    async with ActorRegistry(tmp_path, idle_timeout=None, mirror=False) as reg:
        actor = await reg.get("agent")
        sid = await actor.create_session()
        await actor.append_events(sid, qa_events(count // 2))
        large = await actor.build_working_context(sid, limit=count)
        assert on_workers(threads["build_compacted_context"]), threads
        threads.clear()
        small = await actor.build_working_context(sid, limit=10)
    assert threads["build_compacted_context"] == [threading.current_thread().name]
    assert len(large.messages) == count and large.messages[-10:] == small.messages
    assert large.base_seq == small.base_seq == count and large.token_count


async def test_the_pure_steps_of_a_compaction_go_through_offload() -> None:
    """``run_compaction(offload=...)`` hands each pure step to ``offload``: the plan, the
    summary (``summarize_sync``) and the record for summarize; the plan for compact."""
    steps: list[str] = []

    async def offload(fn: Callable[[], Any]) -> Any:
        steps.append(threading.current_thread().name)
        return fn()

    events = qa_events(8)
    summarizer = RecordingSummarizer()
    summary = await compaction_run.run_compaction(
        events, StrategyConfig(mode="summarize", raw_tail_turns=2), previous_record=None,
        summarizer=summarizer, force=True, offload=offload,
    )  # fmt: skip
    assert summary.record is not None and len(steps) == 3
    # The request's turns were freed inside the last step, not left to the caller's loop.
    assert summarizer.requests and summarizer.requests[0].turns == []
    steps.clear()
    compact = await compaction_run.run_compaction(
        events, StrategyConfig(mode="compact"), previous_record=None, force=True, offload=offload
    )
    assert compact.strategy == "compact" and len(steps) == 1


def test_release_in_steps_empties_containers_and_only_lets_go_of_the_rest() -> None:
    message = ContextMessage(role="user", content="kept", metadata={"k": "v"})
    inner = {"b": [1, 2, [3]], "m": message}
    listed = [inner, "s", {"c": {}}]
    value = {"a": listed, "n": 5}
    off_loop.release_in_steps(value)
    assert value == {} and listed == [] and inner == {}
    assert message.content == "kept" and message.metadata == {"k": "v"}  # a struct: let go


async def test_large_answers_are_freed_on_a_worker_once_sent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: dict[str, list[str]]
) -> None:
    """The answer of a memory view, and of a build of a large window, is freed on a
    worker after it was sent (dropped at once on the loop, a view of 100k events held it
    for a second): once each, and the answers are whole."""
    recording(monkeypatch, off_loop, "release_in_steps", threads)
    count = LARGE_WINDOW_EVENTS + 10
    async with (
        running_server(tmp_path / "memory") as server,
        SessionClient(server.url, "agent") as client,
    ):
        sid = await client.create_session()
        await client.append_events(sid, [msgspec.to_builtins(e) for e in qa_events(count // 2)])
        small = await client.call("context.build", {"session_id": sid, "limit": 10})
        view = await client.call("memory.view", {"session_id": sid})
        built = await client.call("context.build", {"session_id": sid, "limit": count})
    assert len(built["messages"]) == count and built["messages"][-10:] == small["messages"]
    assert len(view["raw_traces"]) == count, sorted(view)
    # One release per large answer (the view, the large build), none for the small build.
    assert len(threads["release_in_steps"]) == 2 and on_workers(threads["release_in_steps"])
