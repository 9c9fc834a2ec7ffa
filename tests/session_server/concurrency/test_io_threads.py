"""``IoThreads``: worker threads draining one FIFO (``storage/io_threads``)."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError, Future
from pathlib import Path
from typing import Any

import pytest

from session_server.concurrency.io_threads import IoThreads
from session_server.concurrency.thread_calls import call_on

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def pool() -> Iterator[IoThreads]:
    with IoThreads(max_workers=2, thread_name_prefix="io-test") as threads:
        yield threads


def test_submit_gives_the_result_or_the_exception(pool: IoThreads) -> None:
    assert pool.submit(lambda a, b=0: a + b, 2, b=3).result(timeout=30) == 5

    def fail() -> None:
        raise KeyError("missing")

    with pytest.raises(KeyError, match="missing"):
        pool.submit(fail).result(timeout=30)


def test_jobs_run_on_the_named_threads_several_at_once(pool: IoThreads) -> None:
    both = threading.Barrier(2, timeout=30)  # passes only when two jobs run together

    def meet() -> str:
        both.wait()
        return threading.current_thread().name

    names = {f.result(timeout=30) for f in [pool.submit(meet), pool.submit(meet)]}
    assert names == {"io-test_0", "io-test_1"}


async def test_the_event_loop_runs_calls_on_it(pool: IoThreads) -> None:
    loop = asyncio.get_running_loop()
    assert await loop.run_in_executor(pool, lambda: threading.current_thread().name) in {
        "io-test_0",
        "io-test_1",
    }


class NoSubmit(IoThreads):
    """A pool whose ``submit`` fails: what still runs went through ``post``."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        raise AssertionError("submit called")


async def test_call_on_posts_its_job_without_a_future() -> None:
    with NoSubmit(max_workers=1, thread_name_prefix="post-test") as pool:
        assert await call_on(pool, lambda x: x * 2, 21) == 42
        with pytest.raises(ValueError, match="bad"):
            await call_on(pool, _raise, ValueError("bad"))


def _raise(exc: BaseException) -> None:
    raise exc


def test_a_posted_job_that_fails_is_logged_and_the_thread_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        IoThreads(max_workers=1, thread_name_prefix="fail-test") as pool,
        caplog.at_level(logging.ERROR, logger="session_server.storage"),
    ):
        pool.post(lambda: _raise(RuntimeError("job failed")))
        # One thread, in order: this runs after the failing job, on the same thread.
        assert pool.submit(lambda: "after").result(timeout=30) == "after"
    [record] = [r for r in caplog.records if r.name == "session_server.storage"]
    assert record.exc_info is not None and "job failed" in str(record.exc_info[1])


def test_shutdown_runs_what_is_queued_then_stops_every_thread() -> None:
    pool = IoThreads(max_workers=3, thread_name_prefix="stop-test")
    release = threading.Event()
    blocked = pool.submit(release.wait, 30)
    queued = [pool.submit(lambda n=n: n) for n in range(5)]
    release.set()
    pool.shutdown(wait=True)
    assert blocked.result(timeout=0) is True
    assert [f.result(timeout=0) for f in queued] == list(range(5))
    assert not any(t.name.startswith("stop-test") for t in threading.enumerate())
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(lambda: None)
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.post(lambda: None)


def test_shutdown_with_cancel_futures_cancels_the_calls_not_started() -> None:
    pool = IoThreads(max_workers=1, thread_name_prefix="cancel-test")
    started, release = threading.Event(), threading.Event()

    def hold() -> str:
        started.set()
        release.wait(30)
        return "ran"

    running = pool.submit(hold)
    assert started.wait(30)
    waiting = pool.submit(lambda: "never")
    posted = threading.Event()
    pool.post(posted.set)  # posted jobs have no future to cancel: they still run
    pool.shutdown(wait=False, cancel_futures=True)
    release.set()
    assert running.result(timeout=30) == "ran"
    with pytest.raises(CancelledError):
        waiting.result(timeout=30)
    assert posted.wait(30)
    pool.shutdown(wait=True)


def test_a_pool_never_used_starts_no_thread_and_shuts_down() -> None:
    pool = IoThreads(max_workers=4, thread_name_prefix="idle-test")
    assert not any(t.name.startswith("idle-test") for t in threading.enumerate())
    pool.shutdown(wait=True)


def test_a_pool_not_shut_down_runs_its_queued_jobs_before_the_interpreter_exits(
    tmp_path: Path,
) -> None:
    """As ``ThreadPoolExecutor``'s: the threads are daemons, and the exit hook shuts the
    pool down (what is queued runs) before the interpreter stops them."""
    done = tmp_path / "done"
    script = (
        "import time\n"
        "from session_server.concurrency.io_threads import IoThreads\n"
        "pool = IoThreads(max_workers=1, thread_name_prefix='exit-test')\n"
        "pool.post(lambda: time.sleep(0.3))\n"
        f"pool.post(lambda: open({str(done)!r}, 'w').close())\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60, cwd=ROOT)
    assert done.exists()


def test_at_least_one_worker() -> None:
    with pytest.raises(ValueError, match="max_workers"):
        IoThreads(max_workers=0, thread_name_prefix="none")
