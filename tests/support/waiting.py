"""``until(predicate, what)``: wait for a state the code exposes, not for a number of loop steps.

A test that needs a task to have reached a point (queued its write, waits on a lock)
waits for the state that point leaves behind, polled, instead of yielding to the loop
a counted number of times: the count breaks whenever a hand-over moves (an eager task on
Python 3.12+, a plain one on 3.11). The deadline guards against a hang; it never
synchronises (a test that reaches it fails).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Final

__all__ = ["DEADLINE_S", "until"]

DEADLINE_S: Final = 30.0
# Short: the states polled are reached within a few loop steps, or by a worker thread.
_POLL_S: Final = 0.001


async def until(predicate: Callable[[], bool], what: str) -> None:
    """Return once ``predicate()`` holds; fail naming ``what`` after ``DEADLINE_S``."""
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(_POLL_S)
