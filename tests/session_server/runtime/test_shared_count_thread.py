"""Many agents' group commits share their registry's one count thread: each batch is
counted exactly once (by its writer or by the count thread) and stored with its own
counts. Real registry, real SQLite files, real threads."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pytest

from session_server import ActorRegistry
from session_server.storage import group_counts, sqlite_ops
from session_server.values.codec import message_to_event, new_event_id
from session_server.values.events import ContextMessage, SessionEvent
from session_server.values.tokens import count_events, get_counter

AGENTS = 6
APPENDS = 24


def events(agent: int, n: int) -> list[SessionEvent]:
    text = f"agent {agent} turn {n}: " + "the quarter's numbers, once more. " * (1 + n % 9)
    messages = [
        ContextMessage(role="user", content=text),
        ContextMessage(role="assistant", content=f"answer {agent}/{n}"),
    ]
    return [message_to_event("", m, new_event_id()) for m in messages]


async def test_one_count_thread_for_many_agents_counts_each_batch_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted: Counter[str] = Counter()  # by the batch's first event id, on either side
    ahead: Counter[str] = Counter()  # by the count thread
    lock = threading.Lock()

    def recording(into: list[Counter[str]]) -> object:
        def count(batch: Iterable[SessionEvent]) -> list[int]:
            batch = list(batch)
            with lock:
                for c in into:
                    c[batch[0].id] += 1
            return count_events(batch)

        return count

    monkeypatch.setattr(sqlite_ops, "count_events", recording([counted]))
    monkeypatch.setattr(group_counts, "count_events", recording([counted, ahead]))
    async with ActorRegistry(tmp_path, idle_timeout=None, mirror=False) as reg:
        actors = [await reg.get(f"agent-{a}") for a in range(AGENTS)]
        sids = [await actor.create_session() for actor in actors]
        written = [[events(a, n) for n in range(APPENDS)] for a in range(AGENTS)]
        # Every agent's appends queued at once: each agent commits them in groups, all
        # agents' groups beside each other.
        await asyncio.gather(
            *(
                actor.append_events(sid, batch)
                for actor, sid, batches in zip(actors, sids, written, strict=True)
                for batch in batches
            )
        )
        stored = [
            await actor.load_events(sid, limit=None)
            for actor, sid in zip(actors, sids, strict=True)
        ]
    counter = get_counter()
    for got, batches in zip(stored, written, strict=True):
        assert [e.id for e in got] == [e.id for b in batches for e in b]
        assert [e.token_count for e in got] == [counter.count_event(e) for e in got]
    firsts = [b[0].id for batches in written for b in batches]
    assert [counted[i] for i in firsts] == [1] * len(firsts)
    assert ahead  # the count thread took part
