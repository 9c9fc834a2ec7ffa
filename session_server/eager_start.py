"""``start_eagerly``: a task whose first step runs now, in the caller (I/O shell).

Python 3.12's ``asyncio.eager_task_factory``, for one coroutine, on 3.11 and any loop
(uvloop included). ``loop.create_task(coro)`` runs nothing before the loop's next
iteration: each hand-over on the request path (the connection's reader to the frame's
handler, the handler to the actor's write-queue drainer) waited for one. Started eagerly,
a sequential ``turn.persist`` reaches the writer thread in the step that read its frame.

The coroutine's first step (up to its first suspension) runs synchronously inside the
caller; the rest runs in a real task, which waits for what the first step waited for and
then goes on. So ``start_eagerly`` returns ``None`` when the coroutine ended in its first
step, and the task otherwise; an exception raised in the first step is the task's, as it
would be with ``create_task`` (nothing is raised here).

On Python 3.12 and later this is ``asyncio.Task(coro, eager_start=True)``. On 3.11,
what differs from ``create_task``, and why the callers here can accept it: during the
first step ``asyncio.current_task()`` is the caller's task and the context is the
caller's. Nothing this package runs in a first step asks for the current task
(``asyncio.timeout``, ``TaskGroup``; 3.11's ``wait_for`` makes a task of its own) or sets
a context variable. A caller runs the first step before its own next statement, so the
first step must not wait for that statement (the callers start their own work only).
"""

from __future__ import annotations

import asyncio
import sys
import types
from collections.abc import Coroutine, Generator
from typing import Any, Final, TypeVar

__all__ = ["start_eagerly"]

T = TypeVar("T")

# ``asyncio.Task(..., eager_start=True)`` (Python 3.12+) does this in C, with the task
# current during the first step.
_EAGER_TASKS: Final = sys.version_info >= (3, 12)


def start_eagerly(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]
) -> asyncio.Task[T] | None:
    """Run ``coro`` up to its first suspension now; the task that runs the rest, or
    ``None`` when it ended there (its result is dropped)."""
    if _EAGER_TASKS:  # 3.12+: the task itself, current while its first step runs
        task: asyncio.Task[T] = asyncio.Task(coro, loop=loop, eager_start=True)  # type: ignore[call-arg,unused-ignore]
        return None if task.done() and not task.cancelled() and task.exception() is None else task
    try:
        yielded = coro.send(None)
    except StopIteration:
        return None
    except BaseException as exc:  # the task's, as with ``create_task``
        return loop.create_task(_raise(exc))
    rest = _resume(coro, yielded)
    # Primed to its first ``yield``: a cancellation before the task's first step then
    # reaches the code that forwards it (thrown into a generator not yet started, it
    # would end the task and leave ``coro`` waiting forever, its locks held).
    rest.send(None)
    return loop.create_task(rest)


async def _raise(exc: BaseException) -> Any:
    raise exc


@types.coroutine
def _resume(coro: Coroutine[Any, Any, T], yielded: Any) -> Generator[Any, Any, T]:
    """The rest of ``coro``, which last yielded ``yielded`` (what the task waits for): a
    ``yield from`` that starts in the middle, so sends and throws go through as they
    would (a cancellation reaches ``coro`` where it waits)."""
    try:
        yield  # where ``start_eagerly`` leaves it; the task's first step sends past it
    except BaseException as exc:
        # Thrown before the task's first step (cancelled at once): as ``Task.cancel``
        # does, cancel what ``coro`` waits for, and it raises there when it resumes;
        # anything else is thrown into ``coro``.
        cancelled = isinstance(exc, asyncio.CancelledError)
        if not (cancelled and asyncio.isfuture(yielded) and yielded.cancel()):
            try:
                yielded = coro.throw(exc)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
    while True:
        try:
            sent = yield yielded
        except BaseException as exc:  # GeneratorExit too: ``coro`` is closed in turn
            try:
                yielded = coro.throw(exc)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            continue
        try:
            yielded = coro.send(sent)
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]
