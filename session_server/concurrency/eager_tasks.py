"""``create_task_eagerly``: asyncio's eager tasks where the running Python has them (I/O shell).

An asyncio primitive with no domain knowledge. On Python 3.12 and later the task is
``asyncio.Task(coro, loop=loop, eager_start=True)``: its first step (up to its first
suspension) runs now, inside the caller, with the task current, so a hand-over (the
connection's reader to a frame's handler, a write's caller to the write-queue drainer)
does not wait for the loop's next iteration. On 3.11, which has no eager tasks, it is a
plain ``loop.create_task(coro)``: the first step runs in a later iteration.

Callers must be correct either way: nothing they do may depend on whether the first step
has run when the call returns. A task may also be done when it is returned (eager, and
it ended in its first step); and a plain task may be cancelled before its first step,
in which case its coroutine never runs at all (not even a ``finally``).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from typing import Any, Final, TypeVar

__all__ = ["EAGER_TASKS", "create_task_eagerly"]

T = TypeVar("T")

# Whether ``create_task_eagerly`` runs the first step in the caller (asyncio has eager
# tasks from Python 3.12 on).
EAGER_TASKS: Final = sys.version_info >= (3, 12)


def create_task_eagerly(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]
) -> asyncio.Task[T]:
    """A task for ``coro`` on ``loop``, started eagerly where asyncio can (3.12+), else a
    plain task; exceptions, the first step's too, are the task's (nothing raised here)."""
    if sys.version_info >= (3, 12):
        return asyncio.Task(coro, loop=loop, eager_start=True)
    return loop.create_task(coro)
