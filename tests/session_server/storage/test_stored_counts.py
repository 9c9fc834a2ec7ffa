"""The token count stored with each event is its message's count
(``TokenCounter.count_event``) on every path whose events the store counts when it
writes them: a persist, an append, a group commit (beside a batch whose counts are given
and a refused one; counted by the writer alone or with a count thread ahead of it), an import, content past ``LARGE_CONTENT_CHARS``, and the estimate
when no encoding loads. A count that fails fails its write, which leaves nothing behind.

Real stores and registries on real SQLite files.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from session_server import ActorRegistry, AgentActor
from session_server.concurrency.worker_threads import WorkerThreads
from session_server.runtime.off_loop import LARGE_CONTENT_CHARS
from session_server.storage.store import AgentStore
from session_server.values import tokens
from session_server.values.codec import message_to_event, new_event_id
from session_server.values.errors import ConflictError
from session_server.values.events import ContextMessage, SessionEvent, ToolCall
from session_server.values.plans import AppendBatch
from session_server.values.tokens import TokenCounter, get_counter


def turn(n: int, sid: str = "") -> list[SessionEvent]:
    """A turn as events with ids: a question, a tool call, its result, an answer."""
    messages = [
        ContextMessage(role="user", content=f"question {n}: what changed this quarter?"),
        ContextMessage(
            role="assistant",
            content="",
            tool_calls=[ToolCall(f"call_{n}", "search", {"query": "q3 north", "n": n})],
        ),
        ContextMessage(
            role="tool",
            content=f"result {n}: " + "revenue 1.24M (+3.1% q/q); churn 2.2%. " * 8,
            tool_call_id=f"call_{n}",
            name="search",
        ),
        ContextMessage(role="assistant", content=f"answer {n}: revenue is up 3.1%."),
    ]
    return [message_to_event(sid, m, new_event_id()) for m in messages]


def expected(events: list[SessionEvent]) -> list[int]:
    counter = get_counter()
    return [counter.count_event(e) for e in events]


@pytest.fixture
def pool() -> Iterator[WorkerThreads]:
    with WorkerThreads(max_workers=2, thread_name_prefix="counts-test") as threads:
        yield threads


@pytest.fixture(params=["writer counts", "count thread"])
async def store(
    tmp_path: Path, pool: WorkerThreads, request: pytest.FixtureRequest
) -> AsyncIterator[AgentStore]:
    """A store whose group commits count on the writer alone, or also on a count thread
    ahead of it (``storage.group_counts``, as the registry's stores do)."""
    with WorkerThreads(max_workers=1, thread_name_prefix="count-test") as counts:
        s = await AgentStore.open(
            tmp_path / "agent.sqlite",
            "agent",
            executor=pool,
            count_executor=counts if request.param == "count thread" else None,
        )
        try:
            yield s
        finally:
            await s.close()


async def stored_counts(store: AgentStore, sid: str) -> list[int | None]:
    return [e.token_count for e in await store.load_events(sid, limit=None)]


async def test_a_group_counts_its_batches_and_keeps_given_counts(store: AgentStore) -> None:
    sid = await store.create_session(None, "s")
    first, given, refused, last = turn(1, sid), turn(2, sid), turn(3, sid), turn(4, sid)
    outcomes = await store.append_group(
        [
            AppendBatch(sid, first, None),
            AppendBatch(sid, given, [7, 8, 9, 10]),
            AppendBatch(sid, refused, None, expected_last_seq=0),
            AppendBatch(sid, last, None),
        ]
    )
    assert isinstance(outcomes[2], ConflictError)
    assert await stored_counts(store, sid) == [*expected(first), 7, 8, 9, 10, *expected(last)]


async def test_a_count_that_fails_fails_its_write_and_leaves_nothing(
    store: AgentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = await store.create_session(None, "s")
    original = TokenCounter.count_event

    def count_event(self: TokenCounter, event: SessionEvent) -> int:
        if event.content == "uncountable":
            raise ValueError("cannot count this")
        return original(self, event)

    monkeypatch.setattr(TokenCounter, "count_event", count_event)
    bad = [
        *turn(1, sid),
        SessionEvent(id=new_event_id(), action="agent_message", content="uncountable"),
    ]
    with pytest.raises(ValueError, match="cannot count this"):
        await store.append(AppendBatch(sid, bad, None, idempotency_key="k"))
    assert await stored_counts(store, sid) == []
    state = await store.session_state(sid)
    assert state is not None and state.last_seq == 0
    # In a group it is not a refusal of one batch (not the project's error): the whole
    # group fails, nothing of it written.
    with pytest.raises(ValueError, match="cannot count this"):
        await store.append_group(
            [AppendBatch(sid, turn(2, sid), None), AppendBatch(sid, bad, None)]
        )
    assert await stored_counts(store, sid) == []
    # The key was rolled back with the rest: the same key, countable now, is written.
    events = turn(3, sid)
    await store.append(AppendBatch(sid, events, None, idempotency_key="k"))
    assert await stored_counts(store, sid) == expected(events)


async def stored_by(tmp_path: Path, write: Callable[[AgentActor], Awaitable[str]]) -> None:
    """Run ``write`` on a fresh agent; every event it stored carries its own count."""
    async with ActorRegistry(tmp_path, idle_timeout=None, mirror=False) as reg:
        actor = await reg.get("agent")
        sid = await write(actor)
        stored = await actor.load_events(sid, limit=None)
    assert stored and [e.token_count for e in stored] == expected(stored)


async def test_persists_appends_and_concurrent_appends_store_their_counts(
    tmp_path: Path,
) -> None:
    async def write(actor: AgentActor) -> str:
        sid = await actor.create_session()
        ctx = await actor.build_working_context(sid)
        ctx.add_messages([ContextMessage(role="user", content="how many tokens is this?")])
        await actor.persist_working_context(sid, ctx, idempotency_key="t1")
        await actor.append_events(sid, turn(1))
        # Queued together: group commits.
        await asyncio.gather(*(actor.append_events(sid, turn(n)) for n in range(2, 6)))
        return sid

    await stored_by(tmp_path, write)


async def test_an_import_stores_its_counts(tmp_path: Path) -> None:
    async def write(actor: AgentActor) -> str:
        sid, _ = await actor.import_events([*turn(1), *turn(2)])
        return sid

    await stored_by(tmp_path, write)


async def test_large_content_is_counted_as_the_rest(tmp_path: Path) -> None:
    """Past ``LARGE_CONTENT_CHARS``: planned off the loop, counted in pieces."""
    big = "word " * (LARGE_CONTENT_CHARS // 5 + 1000)

    async def write(actor: AgentActor) -> str:
        sid = await actor.create_session()
        ctx = await actor.build_working_context(sid)
        ctx.add_messages([ContextMessage(role="user", content=big)])
        await actor.persist_working_context(sid, ctx)
        return sid

    await stored_by(tmp_path, write)


async def test_the_estimate_is_stored_when_no_encoding_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    estimating = TokenCounter("no-such-encoding")
    assert estimating.estimated
    monkeypatch.setitem(tokens._COUNTERS, tokens.DEFAULT_ENCODING, estimating)

    async def write(actor: AgentActor) -> str:
        sid = await actor.create_session()
        await actor.append_events(sid, turn(1))
        return sid

    await stored_by(tmp_path, write)
    events = turn(1)
    assert expected(events) == [estimating.count_event(e) for e in events]
