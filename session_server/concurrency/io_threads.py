"""``IoThreads``: a fixed set of worker threads draining one FIFO of jobs (I/O shell).

A ``concurrent.futures.Executor`` (``submit`` gives a ``Future``; ``run_in_executor``
takes it) with one more door, ``post(job)``: a bare callable queued without a ``Future``.
``concurrency.thread_calls.call_on`` answers its caller's asyncio future from the job itself,
so the ``Future`` that ``ThreadPoolExecutor.submit`` makes (with its condition variable
and re-entrant lock), its work item and the idle-semaphore dance around it are work the
event loop did for nothing on every commit and read: ``submit`` cost 10 to 27 us of the
loop here, ``post`` a queue put (0.2 us).

The threads start with the first job, all of them (there are few: the registry's
``io_threads``). ``shutdown`` lets queued jobs run (or cancels the futures of those not
started, with ``cancel_futures``), then stops every thread. A pool nobody shut down is
shut down at interpreter exit (``atexit``), its queued jobs run first, as
``ThreadPoolExecutor``'s are: its threads are daemon threads only so that this hook, not
the interpreter's join of every thread, decides.
"""

from __future__ import annotations

import atexit
import logging
import queue
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, Final, TypeVar

__all__ = ["IoThreads"]

log = logging.getLogger("session_server.storage")

T = TypeVar("T")

_STOP: Final = object()
"""Queued once per thread by ``shutdown``: the thread that takes it ends."""


class _Submitted:
    """A ``submit``ted call and its future, run by a worker."""

    __slots__ = ("args", "fn", "future", "kwargs")

    def __init__(self, future: Future[Any], fn: Callable[..., Any], args: Any, kwargs: Any) -> None:
        self.future = future
        self.fn = fn
        self.args = args
        self.kwargs = kwargs

    def __call__(self) -> None:
        if not self.future.set_running_or_notify_cancel():
            return  # cancelled before it started
        try:
            result = self.fn(*self.args, **self.kwargs)
        except BaseException as exc:
            self.future.set_exception(exc)
        else:
            self.future.set_result(result)


class IoThreads(Executor):
    """``max_workers`` threads named ``thread_name_prefix_N`` running queued jobs in
    arrival order (several at once: one per thread)."""

    def __init__(self, max_workers: int, thread_name_prefix: str) -> None:
        if max_workers < 1:
            raise ValueError("max_workers: must be at least 1")
        self.max_workers = max_workers
        self._prefix = thread_name_prefix
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()  # starting threads, shutting down
        self._shut = False

    def post(self, job: Callable[[], None]) -> None:
        """Queue ``job()``; it must report its own outcome (an exception it lets out is
        logged and dropped). ``RuntimeError`` after ``shutdown``."""
        # Under the lock: a job queued after ``shutdown``'s stop markers would never run
        # (and its caller never be answered). Uncontended, the lock costs ~0.1 us.
        with self._lock:
            if self._shut:
                raise RuntimeError("cannot schedule new futures after shutdown")
            if not self._threads:
                self._start()
            self._jobs.put(job)

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """``fn(*args, **kwargs)`` on a worker; its outcome in the returned future."""
        future: Future[T] = Future()
        self.post(_Submitted(future, fn, args, kwargs))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No new jobs; with ``cancel_futures`` the submitted calls not started are
        cancelled (posted jobs still run); with ``wait``, return when every thread ended."""
        with self._lock:
            if not self._shut:
                self._shut = True
                if cancel_futures:
                    self._cancel_queued()
                for _ in self._threads:
                    self._jobs.put(_STOP)
        if wait:
            for thread in list(self._threads):
                if thread is not threading.current_thread():
                    thread.join()

    def _cancel_queued(self) -> None:
        kept = []
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                break
            if isinstance(job, _Submitted):
                job.future.cancel()
            else:
                kept.append(job)
        for job in kept:
            self._jobs.put(job)

    def _start(self) -> None:
        """Start every thread (the lock is held)."""
        for n in range(self.max_workers):
            thread = threading.Thread(target=self._work, name=f"{self._prefix}_{n}", daemon=True)
            thread.start()
            self._threads.append(thread)
        _LIVE.add(self)

    def _work(self) -> None:
        jobs = self._jobs
        while True:
            job = jobs.get()
            if job is _STOP:
                return
            try:
                job()
            except BaseException:  # a posted job's own failure: it does not end the thread
                log.exception("a job on an I/O thread failed")
            del job  # not kept alive while the thread waits for the next one


_LIVE: weakref.WeakSet[IoThreads] = weakref.WeakSet()
"""Pools whose threads started (shut down again at exit: a second ``shutdown`` does nothing)."""


@atexit.register
def _shutdown_at_exit() -> None:
    for pool in list(_LIVE):
        pool.shutdown(wait=True)
