"""``GroupCounts``: a group commit's token counts taken on a count thread ahead of the
writer. Each batch is counted once, by one thread; the writer never waits for a count
that has not started; what the count thread gives equals ``count_events``; a count that
failed there is the writer's to take again."""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator

import pytest

from session_server.concurrency.worker_threads import WorkerThreads
from session_server.storage import group_counts
from session_server.storage.group_counts import GroupCounts
from session_server.values.codec import new_event_id
from session_server.values.events import SessionEvent
from session_server.values.plans import AppendBatch
from session_server.values.tokens import count_events


def batch(n: int, given: bool = False) -> AppendBatch:
    events = [
        SessionEvent(id=new_event_id(), action="user_message", content=f"question {n} " * n),
        SessionEvent(id=new_event_id(), action="agent_message", content=f"answer {n}"),
    ]
    return AppendBatch("s", events, [1, 2] if given else None)


class Inline(WorkerThreads):
    """Runs each job at once, inside ``post``: the count thread is always ahead."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="inline")

    def post(self, job: Callable[[], object]) -> None:
        job()


class Held(WorkerThreads):
    """Keeps each job until ``run_held``: the count thread has not started."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="held")
        self.jobs: list[Callable[[], object]] = []

    def post(self, job: Callable[[], object]) -> None:
        self.jobs.append(job)

    def run_held(self) -> None:
        for job in self.jobs:
            job()


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """How many times the count thread counted each batch (by its first event's id)."""
    calls: Counter[str] = Counter()

    def counting(events: Iterable[SessionEvent]) -> list[int]:
        events = list(events)
        calls[events[0].id] += 1
        return count_events(events)

    monkeypatch.setattr(group_counts, "count_events", counting)
    yield calls


def test_ahead_the_count_thread_gives_every_later_batch_its_counts(counted: Counter[str]) -> None:
    batches = [batch(n) for n in range(1, 6)]
    ahead = GroupCounts(batches, Inline())
    assert ahead.take(0) is None  # the first batch is the writer's
    for i in range(1, 5):
        assert ahead.take(i) == count_events(batches[i].events)
    assert sum(counted.values()) == 4


def test_given_counts_and_empty_batches_are_not_counted(counted: Counter[str]) -> None:
    batches = [batch(1), batch(2, given=True), AppendBatch("s", [], []), batch(3)]
    ahead = GroupCounts(batches, Inline())
    assert [ahead.take(i) is None for i in range(4)] == [True, True, True, False]
    assert sum(counted.values()) == 1


def test_the_writer_never_waits_for_a_count_not_started(counted: Counter[str]) -> None:
    held = Held()
    batches = [batch(n) for n in range(1, 5)]
    ahead = GroupCounts(batches, held)
    assert [ahead.take(i) for i in range(4)] == [None] * 4  # the writer counts them all
    held.run_held()  # the count thread comes late: every batch is claimed, none counted twice
    assert sum(counted.values()) == 0


def test_a_shut_down_count_thread_leaves_every_count_to_the_writer() -> None:
    pool = WorkerThreads(max_workers=1, thread_name_prefix="count-test")
    pool.shutdown()
    ahead = GroupCounts([batch(1), batch(2)], pool)
    assert [ahead.take(0), ahead.take(1)] == [None, None]


def test_a_count_that_failed_ahead_is_the_writers_to_take_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def failing(events: Iterable[SessionEvent]) -> list[int]:
        raise ValueError("cannot count this")

    monkeypatch.setattr(group_counts, "count_events", failing)
    ahead = GroupCounts([batch(1), batch(2)], Inline())
    assert ahead.take(1) is None


def test_on_a_real_thread_each_batch_is_counted_once_and_right(counted: Counter[str]) -> None:
    rng = random.Random(7)
    writer: Counter[str] = Counter()
    ids: list[str] = []
    firsts: list[str] = []
    with WorkerThreads(max_workers=1, thread_name_prefix="count-test") as pool:
        for _ in range(200):
            batches = [batch(n) for n in rng.sample(range(1, 60), rng.randint(2, 12))]
            ids += [b.events[0].id for b in batches]
            firsts.append(batches[0].events[0].id)
            ahead = GroupCounts(batches, pool)
            for i, b in enumerate(batches):
                counts = ahead.take(i)
                if counts is None:  # the writer's: counted here
                    writer[b.events[0].id] += 1
                    counts = count_events(b.events)
                assert counts == count_events(b.events)
    # The pool has shut down (every count job ended): each batch was counted by one side.
    assert [counted[i] + writer[i] for i in ids] == [1] * len(ids)
    # Both sides took part: the first batch of each group is always the writer's (it
    # starts before the count thread wakes); which side takes the others depends on the
    # threads' timing (the count thread may win them all).
    assert all(writer[i] == 1 for i in firsts)
    assert counted


class Abort(BaseException):
    """Not an ``Exception``: what an exception injected into a thread may be."""


def test_a_count_thread_stopped_mid_count_leaves_the_batch_to_the_writer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started = threading.Event()

    def stopped(events: Iterable[SessionEvent]) -> list[int]:
        started.set()
        raise Abort

    monkeypatch.setattr(group_counts, "count_events", stopped)
    taken: list[list[int] | None] = []
    with WorkerThreads(max_workers=1, thread_name_prefix="count-test") as pool:
        ahead = GroupCounts([batch(1), batch(2)], pool)
        assert started.wait(timeout=30)  # the count thread claimed batch 1, then stopped
    # The writer counts batch 1 itself instead of waiting for a count that ended. (A
    # daemon thread and the timeout only bound a failure: the answer comes at once.)
    writer = threading.Thread(target=lambda: taken.append(ahead.take(1)), daemon=True)
    writer.start()
    writer.join(timeout=30)
    assert taken == [None]
