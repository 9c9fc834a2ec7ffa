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


def test_take_counts_what_is_already_in_memory_even_past_the_capacity() -> None:
    budget = ByteBudget(1000, large_share=1.0)
    token = budget.try_acquire(900)
    assert token is not None
    extra = budget.take(300)  # an answer that must be sent: counted, never refused
    assert budget.in_use == 1200 and budget.peak == 1200
    assert not budget.fits(1) and budget.try_acquire(1) is None
    budget.release(extra)
    budget.release(token)
    assert budget.in_use == 0 and budget.peak == 1200


async def test_shrink_keeps_the_encoded_size_and_lets_the_waiters_in() -> None:
    budget = ByteBudget(1000, large_share=1.0)
    reservation = budget.try_acquire(800)  # what an answer may hold
    assert reservation is not None
    waiting = asyncio.ensure_future(budget.acquire(800))
    await asyncio.sleep(0)
    assert budget.waiting == 1
    kept = budget.shrink(reservation, 150)  # what it holds once encoded
    assert kept == -150 and budget.in_use == 950  # 150 kept + 800 granted to the waiter
    assert await waiting == -800
    assert budget.shrink(kept, 400) == kept  # never grows
    budget.release(kept)
    assert budget.in_use == 800


def test_a_reservation_larger_than_the_capacity_fits_an_empty_budget() -> None:
    budget = ByteBudget(100, large_share=1.0)  # a share smaller than one answer
    token = budget.try_acquire(5000)
    assert token is not None and budget.in_use == 100  # one always may
    assert budget.try_acquire(1) is None
    budget.release(token)
    assert budget.in_use == 0
