"""``call_on``: one call on a worker thread, awaited from the loop (``storage/thread_calls``)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from session_server.concurrency.thread_calls import call_on
from tests.support.waiting import until


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="calls-test") as executor:
        yield executor


async def test_the_result_comes_back_from_a_pool_thread(pool: ThreadPoolExecutor) -> None:
    def where(a: int, b: int) -> tuple[str, int]:
        return threading.current_thread().name, a + b

    name, total = await call_on(pool, where, 2, 3)
    assert name.startswith("calls-test") and total == 5


async def test_an_exception_is_raised_in_the_caller_as_it_was(pool: ThreadPoolExecutor) -> None:
    def fail() -> None:
        raise KeyError("missing")

    with pytest.raises(KeyError, match="missing"):
        await call_on(pool, fail)

    def stop() -> None:
        raise StopIteration("done")

    with pytest.raises(RuntimeError, match="StopIteration"):
        await call_on(pool, stop)


async def test_a_caller_that_leaves_does_not_break_the_job_or_the_loop(
    pool: ThreadPoolExecutor,
) -> None:
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait(30)
        finished.set()
        return "late"

    call = asyncio.create_task(call_on(pool, slow))
    await asyncio.to_thread(started.wait, 30)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    release.set()
    await asyncio.to_thread(finished.wait, 30)
    # The job ran to its end; its answer went nowhere, and the next call works.
    assert await call_on(pool, lambda: "next") == "next"


async def test_then_answers_what_waits_on_it_before_the_caller_resumes(
    pool: ThreadPoolExecutor,
) -> None:
    loop = asyncio.get_running_loop()
    order: list[str] = []
    other: asyncio.Future[int] = loop.create_future()
    ready = asyncio.Event()

    async def waiter() -> None:
        ready.set()  # this test resumes in a later step, when ``await other`` waits
        order.append(f"other got {await other}")

    waiting = asyncio.create_task(waiter())
    await ready.wait()
    seen: list[int] = []

    def then(result: int) -> None:
        assert threading.current_thread() is threading.main_thread(), "on the loop"
        seen.append(result)
        other.set_result(result)

    assert await call_on(pool, lambda: 7, then=then) == 7
    order.append("caller")
    await waiting
    # ``then`` ran in the step that learnt of the result, so what it answered was woken
    # in the same step as the caller, ahead of it.
    assert seen == [7]
    assert order == ["other got 7", "caller"]


async def test_then_is_skipped_on_a_failure_and_its_own_failure_is_the_callers(
    pool: ThreadPoolExecutor,
) -> None:
    ran: list[object] = []

    def fail() -> int:
        raise KeyError("in the job")

    with pytest.raises(KeyError, match="in the job"):
        await call_on(pool, fail, then=ran.append)
    assert ran == [], "not run when the job raised"

    def broken(result: int) -> None:
        ran.append(result)
        raise ValueError("in then")

    with pytest.raises(ValueError, match="in then"):
        await call_on(pool, lambda: 1, then=broken)
    assert ran == [1]


async def test_a_stop_iteration_from_then_reaches_the_caller(pool: ThreadPoolExecutor) -> None:
    def stops(result: int) -> None:
        raise StopIteration("in then")

    with pytest.raises(RuntimeError, match="StopIteration raised by then"):
        await asyncio.wait_for(call_on(pool, lambda: 1, then=stops), timeout=30)


async def test_then_is_skipped_when_the_caller_left() -> None:
    started, release = threading.Event(), threading.Event()
    ran: list[object] = []

    def slow() -> str:
        started.set()
        release.wait(30)
        return "late"

    with ThreadPoolExecutor(max_workers=1) as one:
        call = asyncio.create_task(call_on(one, slow, then=ran.append))
        await asyncio.to_thread(started.wait, 30)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        release.set()
        # One thread: the slow job's answer reaches the loop before the next one's.
        assert await call_on(one, lambda: "next", then=ran.append) == "next"
    assert ran == ["next"]


class RecordingPool(ThreadPoolExecutor):
    """A pool that keeps the futures of the jobs submitted to it."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.submitted: list[Future[Any]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future = super().submit(fn, *args, **kwargs)
        self.submitted.append(future)
        return future


def test_a_job_that_ends_after_its_loop_closed_raises_nothing_on_its_thread() -> None:
    release = threading.Event()
    with RecordingPool() as pool:

        def slow() -> int:
            release.wait(30)
            return 1

        async def start() -> None:
            task = asyncio.create_task(call_on(pool, slow))
            await until(lambda: bool(pool.submitted), "the job to be submitted")
            task.cancel()

        loop = asyncio.new_event_loop()
        loop.run_until_complete(start())
        loop.close()
        release.set()
        [job] = pool.submitted
        # Answering a closed loop raises RuntimeError; the job keeps it to itself.
        assert job.result(timeout=30) is None
