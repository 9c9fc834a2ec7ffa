"""``WorkerThreads``: the one way off the event loop (``concurrency/worker_threads``)."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session_server.concurrency.worker_threads import WorkerThreads, default_threads
from tests.support.waiting import until

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def pool() -> Iterator[WorkerThreads]:
    with WorkerThreads(max_workers=2, thread_name_prefix="io-test") as threads:
        yield threads


async def test_the_result_comes_back_from_a_named_pool_thread(pool: WorkerThreads) -> None:
    def where(a: int, b: int) -> tuple[str, int]:
        return threading.current_thread().name, a + b

    name, total = await pool.run(where, 2, 3)
    assert name in {"io-test_0", "io-test_1"} and total == 5


async def test_an_exception_is_raised_in_the_caller_as_it_was(pool: WorkerThreads) -> None:
    def fail() -> None:
        raise KeyError("missing")

    with pytest.raises(KeyError, match="missing"):
        await pool.run(fail)

    def stop() -> None:
        raise StopIteration("done")

    with pytest.raises(RuntimeError, match="StopIteration"):
        await pool.run(stop)


async def test_jobs_run_several_at_once(pool: WorkerThreads) -> None:
    both = threading.Barrier(2, timeout=30)  # passes only when two jobs run together

    def meet() -> str:
        both.wait()
        return threading.current_thread().name

    names = set(await asyncio.gather(pool.run(meet), pool.run(meet)))
    assert names == {"io-test_0", "io-test_1"}


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(), max_size=30))
def test_one_thread_runs_the_jobs_in_the_order_they_were_queued(values: list[int]) -> None:
    """The FIFO the store's order rests on: one thread, arrival order, whatever the mix of
    awaited and posted jobs."""
    seen: list[int] = []

    async def post(pool: WorkerThreads, value: int) -> None:
        pool.post(lambda: seen.append(value))

    async def main(pool: WorkerThreads) -> list[int]:
        # Tasks take their first step in the order they were made: that is the order
        # their jobs are queued in.
        await asyncio.gather(
            *(
                post(pool, value) if i % 3 == 2 else pool.run(seen.append, value)
                for i, value in enumerate(values)
            )
        )
        return await pool.run(lambda: list(seen))

    with WorkerThreads(max_workers=1, thread_name_prefix="order-test") as one:
        assert asyncio.run(main(one)) == values


async def test_the_caller_is_answered_on_its_own_loop(pool: WorkerThreads) -> None:
    loop = asyncio.get_running_loop()
    answered_on: list[asyncio.AbstractEventLoop] = []
    future = asyncio.ensure_future(pool.run(lambda: 1))
    future.add_done_callback(lambda _: answered_on.append(asyncio.get_running_loop()))
    assert await future == 1
    await until(lambda: bool(answered_on), "the done callback")
    assert answered_on == [loop]


async def test_a_caller_that_leaves_does_not_break_the_job_or_the_loop(
    pool: WorkerThreads,
) -> None:
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def slow() -> str:
        started.set()
        release.wait(30)
        finished.set()
        return "late"

    call = asyncio.create_task(pool.run(slow))
    assert await pool.run(started.wait, 30)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    release.set()
    assert await pool.run(finished.wait, 30)
    # The job ran to its end; its answer went nowhere, and the next call works.
    assert await pool.run(lambda: "next") == "next"


async def test_run_to_end_holds_a_cancelled_caller_until_the_job_ended(
    pool: WorkerThreads,
) -> None:
    started, release = threading.Event(), threading.Event()
    lock = asyncio.Lock()

    def swap() -> str:
        started.set()
        release.wait(30)
        return "swapped"

    async def under_lock() -> str:
        async with lock:
            return await pool.run_to_end(swap)

    call = asyncio.create_task(under_lock())
    await until(started.is_set, "the job to start")
    call.cancel()
    # The cancellation is delivered at the loop's next steps; the caller still waits
    # (with ``run`` it would have left at once, the job still running).
    done, _ = await asyncio.wait({call}, timeout=0.5)
    assert not done and lock.locked(), "the caller waits for its job"
    call.cancel()  # again: still held
    done, _ = await asyncio.wait({call}, timeout=0.2)
    assert not done
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await call
    assert not lock.locked()
    assert await pool.run_to_end(lambda: "next") == "next"


def test_a_job_that_ends_after_its_loop_closed_raises_nothing_on_its_thread(
    caplog: pytest.LogCaptureFixture,
) -> None:
    started, release, ended = threading.Event(), threading.Event(), threading.Event()
    with (
        WorkerThreads(max_workers=1, thread_name_prefix="closed-test") as pool,
        caplog.at_level(logging.ERROR, logger="session_server.threads"),
    ):

        def slow() -> int:
            started.set()
            release.wait(30)
            return 1

        async def start() -> None:
            task = asyncio.create_task(pool.run(slow))
            await until(started.is_set, "the job to start")
            task.cancel()

        loop = asyncio.new_event_loop()
        loop.run_until_complete(start())
        loop.close()
        release.set()
        # One thread, in order: this runs after the slow job answered a closed loop.
        pool.post(ended.set)
        assert ended.wait(30)
    assert not caplog.records
    assert not any(t.name.startswith("closed-test") for t in threading.enumerate())


def _raise(exc: BaseException) -> None:
    raise exc


async def test_a_posted_job_that_fails_is_logged_and_the_thread_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        WorkerThreads(max_workers=1, thread_name_prefix="fail-test") as pool,
        caplog.at_level(logging.ERROR, logger="session_server.threads"),
    ):
        pool.post(lambda: _raise(RuntimeError("job failed")))
        # One thread, in order: this runs after the failing job, on the same thread.
        assert await pool.run(lambda: "after") == "after"
    [record] = [r for r in caplog.records if r.name == "session_server.threads"]
    assert record.exc_info is not None and "job failed" in str(record.exc_info[1])


def test_shutdown_runs_what_is_queued_then_stops_every_thread() -> None:
    pool = WorkerThreads(max_workers=3, thread_name_prefix="stop-test")
    release = threading.Event()
    ran: list[str] = []
    pool.post(lambda: ran.append(f"blocked {release.wait(30)}"))
    for n in range(5):
        pool.post(lambda n=n: ran.append(str(n)))
    release.set()
    pool.shutdown(wait=True)
    assert sorted(ran) == ["0", "1", "2", "3", "4", "blocked True"]
    assert not any(t.name.startswith("stop-test") for t in threading.enumerate())
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.post(lambda: None)

    async def late() -> None:
        await pool.run(lambda: None)

    with pytest.raises(RuntimeError, match="after shutdown"):
        asyncio.run(late())


def test_a_pool_never_used_starts_no_thread_and_shuts_down() -> None:
    pool = WorkerThreads(max_workers=4, thread_name_prefix="idle-test")
    assert not any(t.name.startswith("idle-test") for t in threading.enumerate())
    pool.shutdown(wait=True)


def test_a_pool_not_shut_down_runs_its_queued_jobs_before_the_interpreter_exits(
    tmp_path: Path,
) -> None:
    """The threads are daemons, and the exit hook shuts the pool down (what is queued
    runs) before the interpreter stops them."""
    done = tmp_path / "done"
    script = (
        "import time\n"
        "from session_server.concurrency.worker_threads import WorkerThreads\n"
        "pool = WorkerThreads(max_workers=1, thread_name_prefix='exit-test')\n"
        "pool.post(lambda: time.sleep(0.3))\n"
        f"pool.post(lambda: open({str(done)!r}, 'w').close())\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60, cwd=ROOT)
    assert done.exists()


def test_the_default_pool_is_one_per_process_and_serves_any_loop() -> None:
    assert default_threads() is default_threads()

    async def where() -> str:
        return await default_threads().run(lambda: threading.current_thread().name)

    # Two loops one after the other (as ``Runner.run_sync`` makes): each is answered.
    for _ in range(2):
        assert asyncio.run(where()).startswith("session-server-worker_")


def test_at_least_one_worker() -> None:
    with pytest.raises(ValueError, match="max_workers"):
        WorkerThreads(max_workers=0, thread_name_prefix="none")
