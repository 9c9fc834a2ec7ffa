"""The event loop never waits for the token encoding's load (real registry and SQLite).

At start-up the registry loads the encoding on a worker thread, holding the counters'
lock for about half a second; a persist under a compacting strategy without reported
usage counts the context on the loop (``core.turn_pressure.context_tokens``). Here the
load is held for as long as the test wants (the encoding is unloaded and the lock is
taken), and the lock is replaced by a guard that fails at once when the loop's thread
asks for it: before the fix the persist took it on the loop (and the loop would have
waited for the whole load); now the actor waits for the load on a worker thread while
the loop goes on, and the flag the persist sets is the one the real count gives.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from session_server.runtime.registry import ActorRegistry
from session_server.values import tokens
from session_server.values.context import WorkingContext
from session_server.values.events import ContextMessage, SessionEvent

# A prompt budget of 400 tokens (1000 - 600 reserved): the turn's text passes it.
STRATEGY = {"mode": "compact", "max_context_tokens": 1000, "safety_margin_tokens": 600}
TEXT = "lorem ipsum dolor " * 200  # about 600 tokens


class LoopGuard:
    """Stands for the counters' lock: on the event loop's thread it fails instead of
    waiting; another thread waits for ``held`` and is counted while it waits."""

    def __init__(self, held: threading.Lock, loop_thread: int, on_wait: Any) -> None:
        self.held = held
        self.loop_thread = loop_thread
        self.on_wait = on_wait
        self.on_loop = 0

    def __enter__(self) -> LoopGuard:
        if threading.get_ident() == self.loop_thread:
            self.on_loop += 1
            raise AssertionError("the event loop waited for the token encoding's load")
        self.on_wait()
        self.held.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.held.release()


@pytest.fixture
async def held_load(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``hold()``: the encoding unloaded and its load held until ``release()``; returns
    ``(guard, waiters, release)``: ``waiters`` is set once two worker threads wait for the
    load (the registry's start-up load and the actor's)."""
    loop = asyncio.get_running_loop()
    waiters = asyncio.Event()
    count = 0
    count_lock = threading.Lock()

    def on_wait() -> None:
        nonlocal count
        with count_lock:
            count += 1
            if count == 2:
                loop.call_soon_threadsafe(waiters.set)

    held = threading.Lock()
    guard = LoopGuard(held, threading.get_ident(), on_wait)
    saved = dict(tokens._COUNTERS)
    holding = False

    def release() -> None:
        nonlocal holding
        if holding:
            holding = False
            held.release()

    def hold() -> tuple[LoopGuard, asyncio.Event, Any]:
        nonlocal holding
        held.acquire()
        holding = True
        tokens._COUNTERS.clear()
        monkeypatch.setattr(tokens, "_COUNTERS_LOCK", guard)
        return guard, waiters, release

    try:
        yield hold
    finally:
        release()
        tokens._COUNTERS.update(saved)


async def test_a_persist_while_the_encoding_loads_waits_off_the_loop(
    tmp_path: Path, held_load: Any
) -> None:
    guard, waiters, release = held_load()
    async with ActorRegistry(
        tmp_path, idle_timeout=None, mirror=False, default_strategy=STRATEGY
    ) as reg:
        try:
            actor = await reg.get("agent")

            async def turn() -> bool:
                sid = await actor.create_session()
                ctx = WorkingContext([], [], base_seq=0)
                ctx.add_messages(
                    [ContextMessage(role="user", content=TEXT), ContextMessage(role="assistant")]
                )
                result = await actor.persist_working_context(sid, ctx)
                return result.compaction_required

            work = asyncio.ensure_future(turn())
            # Both the start-up load and the actor's wait for the held load on worker
            # threads; meanwhile this coroutine runs: the loop is not blocked.
            waiting = asyncio.ensure_future(waiters.wait())
            await asyncio.wait({work, waiting}, return_when=asyncio.FIRST_COMPLETED)
            if work.done():
                work.result()  # raises what went wrong (the loop asked for the lock)
            assert not work.done() and guard.on_loop == 0
            assert tokens.loaded_counter() is None
            release()
            assert await work  # the real count of the turn passes the budget
            assert guard.on_loop == 0 and tokens.loaded_counter() is not None
        finally:
            release()  # before the registry's close waits for its start-up load


async def test_a_pop_with_a_replacement_counts_it_after_the_load(
    tmp_path: Path, held_load: Any
) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None, mirror=False) as reg:
        actor = await reg.get("agent")
        sid = await actor.create_session()
        await actor.append_events(sid, [SessionEvent(content="q")])
    # A server started again: the encoding not loaded yet, the agent's store closed.
    guard, waiters, release = held_load()
    async with ActorRegistry(tmp_path, idle_timeout=None, mirror=False) as reg:
        try:
            actor = await reg.get("agent")

            async def pop() -> int | None:
                await actor.pop_event(sid, replace_with=SessionEvent(content=TEXT))
                events = await actor.load_events(sid, limit=None)
                return events[-1].token_count

            work = asyncio.ensure_future(pop())
            waiting = asyncio.ensure_future(waiters.wait())
            await asyncio.wait({work, waiting}, return_when=asyncio.FIRST_COMPLETED)
            if work.done():
                work.result()
            assert not work.done() and guard.on_loop == 0
            release()
            counted = await work
            assert counted == tokens.get_counter().count_event(SessionEvent(content=TEXT))
            assert guard.on_loop == 0
        finally:
            release()  # before the registry's close waits for its start-up load
