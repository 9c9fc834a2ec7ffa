"""``WorkerThreads``: the one way off the event loop (I/O shell).

aiosqlite's shape: a fixed set of worker threads drains one FIFO of ``(function,
future)`` jobs. ``await threads.run(fn, *args)`` queues ``fn(*args)`` with an asyncio
future of the caller's loop; the worker that runs it answers that future through
``loop.call_soon_threadsafe``, and the caller resumes with the result (or the exception
raised here). On the loop that is a future and a queue put, then one callback: no
``concurrent.futures.Future`` with its condition variable, no future chained to
another, no executor work item.

``post(job)`` queues a job nobody awaits, from any thread (a warm-up, freeing a
request's answer after it was sent, a group commit's token counts taken ahead of the
writer); an exception it lets out is logged.

A caller that stops waiting (cancelled) does not withdraw a job already queued: the job
runs and its answer is dropped, as in aiosqlite. Callers that need to know a write
ended wait for it apart from their own cancellation (the actor's write queue).

The threads start with the first job, all of them (there are few). ``shutdown`` lets the
queued jobs run, then stops every thread. A pool nobody shut down is shut down at
interpreter exit (``atexit``), its queued jobs run first: its threads are daemon threads
only so that this hook, not the interpreter's join of every thread, decides.

``default_threads()`` is the process's shared pool, for code that has none of its own (a
store opened outside a registry, the Agents SDK session), as the loop's default executor
is for ``run_in_executor(None, ...)``.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import queue
import threading
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import Any, Final, Self, TypeVar

__all__ = ["WorkerThreads", "default_threads"]

log = logging.getLogger("session_server.threads")

T = TypeVar("T")

_STOP: Final = object()
"""Queued once per thread by ``shutdown``: the thread that takes it ends."""

_Job = tuple[
    Callable[..., Any],
    tuple[Any, ...],
    asyncio.AbstractEventLoop | None,
    "asyncio.Future[Any] | None",
]
"""``(fn, args, loop, future)``; ``loop`` and ``future`` are ``None`` for a posted job."""


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    """On the caller's loop: answer the caller, unless it left."""
    if future.cancelled():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


class WorkerThreads:
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

    async def run(self, fn: Callable[..., T], /, *args: Any) -> T:
        """``fn(*args)`` on a worker thread; its result, or its exception raised here.
        ``RuntimeError`` after ``shutdown``."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._put((fn, args, loop, future))
        return await future

    async def run_to_end(self, fn: Callable[..., T], /, *args: Any) -> T:
        """``run``, except that a caller cancelled meanwhile still waits for the job to
        end before the cancellation reaches it: for work that must not outlive the locks
        its caller holds (an agent file replaced while no call may reopen it)."""
        job = asyncio.ensure_future(self.run(fn, *args))
        try:
            return await asyncio.shield(job)
        except asyncio.CancelledError:
            while not job.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait([job])
            if not job.cancelled():
                job.exception()  # retrieved: the caller was cancelled, that is its answer
            raise

    def post(self, job: Callable[[], object]) -> None:
        """Queue ``job()``, awaited by nobody (an exception it lets out is logged).
        ``RuntimeError`` after ``shutdown``."""
        self._put((job, (), None, None))

    def _put(self, job: _Job) -> None:
        # Under the lock: a job queued after ``shutdown``'s stop markers would never run
        # (and its caller never be answered).
        with self._lock:
            if self._shut:
                raise RuntimeError("cannot run a job on worker threads after shutdown")
            if not self._threads:
                self._start()
            self._jobs.put(job)

    def shutdown(self, wait: bool = True) -> None:
        """No new jobs; the queued ones still run. With ``wait``, return when every
        thread ended (a thread of this pool calling it does not wait for itself)."""
        with self._lock:
            if not self._shut:
                self._shut = True
                for _ in self._threads:
                    self._jobs.put(_STOP)
        if wait:
            for thread in list(self._threads):
                if thread is not threading.current_thread():
                    thread.join()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown(wait=True)

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
            fn, args, loop, future = job
            del job  # nothing of a job is kept alive while the thread waits for the next
            if loop is None:
                try:
                    fn()
                except BaseException:  # a posted job's own failure: it does not end the thread
                    log.exception("a job on a worker thread failed")
                del fn, args
                continue
            result: Any = None
            error: BaseException | None = None
            try:
                result = fn(*args)
            except StopIteration as exc:  # an asyncio future refuses StopIteration itself
                error = RuntimeError(f"StopIteration raised on a worker thread: {exc!r}")
            except BaseException as exc:  # handed to the caller, as it was raised
                error = exc
            del fn, args
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits now
                loop.call_soon_threadsafe(_settle, future, result, error)
            del loop, future, result, error


_LIVE: weakref.WeakSet[WorkerThreads] = weakref.WeakSet()
"""Pools whose threads started (shut down again at exit: a second ``shutdown`` does nothing)."""

_default: WorkerThreads | None = None
_default_lock = threading.Lock()


def default_threads() -> WorkerThreads:
    """The process's shared pool (``min(32, cpus + 4)`` threads, as
    ``ThreadPoolExecutor``'s default), made at the first call."""
    global _default
    with _default_lock:
        if _default is None:
            _default = WorkerThreads(
                max_workers=min(32, (os.cpu_count() or 1) + 4),
                thread_name_prefix="session-server-worker",
            )
        return _default


@atexit.register
def _shutdown_at_exit() -> None:
    for pool in list(_LIVE):
        pool.shutdown(wait=True)
