"""``ByteBudget.try_acquire``: the reader's fast path (``budget``)."""

from __future__ import annotations

import asyncio

from session_server.budget import ByteBudget
from tests.support.waiting import until


def test_try_acquire_takes_what_fits_and_release_gives_it_back() -> None:
    budget = ByteBudget(10_000)  # small below 625 bytes
    token = budget.try_acquire(100)
    assert token == 100 and budget.in_use == 100
    budget.release(token)
    assert budget.in_use == 0


def test_try_acquire_refuses_what_does_not_fit_without_queueing() -> None:
    budget = ByteBudget(1000)  # small below 62 bytes
    assert [budget.try_acquire(60) for _ in range(16)] == [60] * 16
    assert budget.try_acquire(50) is None  # 960 + 50 > 1000
    assert budget.in_use == 960 and budget.waiting == 0


def test_a_large_frame_is_counted_in_the_large_share() -> None:
    budget = ByteBudget(1000)  # large from 62 bytes, at most 500 of them at once
    token = budget.try_acquire(400)
    assert token == -400 and budget.large_in_use == 400
    assert budget.try_acquire(200) is None  # past the large share
    assert budget.try_acquire(50) == 50  # small ones still get through
    budget.release(token)
    assert budget.large_in_use == 0


async def test_try_acquire_does_not_jump_a_queue_of_its_class() -> None:
    budget = ByteBudget(1000)
    held = [budget.try_acquire(60) for _ in range(16)]  # 960 of 1000, in small frames
    waiting = asyncio.ensure_future(budget.acquire(50))  # does not fit: queued
    await until(lambda: budget.waiting == 1, "the request to queue")
    assert not waiting.done()
    assert budget.try_acquire(10) is None  # it fits, but would pass the waiter
    token = held.pop()
    assert token is not None
    budget.release(token)  # the waiter is served first ...
    assert await waiting == 50
    assert budget.try_acquire(10) == 10  # ... then the next one
