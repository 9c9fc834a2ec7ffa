"""Flow control (``flow``): ``Permits`` (a connection's in-flight slots, the large-frame
permits) and ``ByteBudget`` (request bytes, unread answer bytes), one vocabulary:
``acquire_nowait`` (raises ``WouldBlock``), ``acquire``, ``release``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session_server.concurrency.flow import ByteBudget, Permits, WouldBlock
from tests.support.waiting import until

# -- ByteBudget: the reader's fast path ---------------------------------------------------


def test_acquire_nowait_takes_what_fits_and_release_gives_it_back() -> None:
    budget = ByteBudget(10_000)  # small below 625 bytes
    token = budget.acquire_nowait(100)
    assert token == 100 and budget.in_use == 100
    budget.release(token)
    assert budget.in_use == 0


def test_acquire_nowait_refuses_what_does_not_fit_without_queueing() -> None:
    budget = ByteBudget(1000)  # small below 62 bytes
    assert [budget.acquire_nowait(60) for _ in range(16)] == [60] * 16
    with pytest.raises(WouldBlock):
        budget.acquire_nowait(50)  # 960 + 50 > 1000
    assert budget.in_use == 960 and budget.waiting == 0


def test_a_large_frame_is_counted_in_the_large_share() -> None:
    budget = ByteBudget(1000)  # large from 62 bytes, at most 500 of them at once
    token = budget.acquire_nowait(400)
    assert token == -400 and budget.large_in_use == 400
    with pytest.raises(WouldBlock):
        budget.acquire_nowait(200)  # past the large share
    assert budget.acquire_nowait(50) == 50  # small ones still get through
    budget.release(token)
    assert budget.large_in_use == 0


async def test_acquire_nowait_does_not_jump_a_queue_of_its_class() -> None:
    budget = ByteBudget(1000)
    held = [budget.acquire_nowait(60) for _ in range(16)]  # 960 of 1000, in small frames
    waiting = asyncio.ensure_future(budget.acquire(50))  # does not fit: queued
    await until(lambda: budget.waiting == 1, "the request to queue")
    assert budget.waiting == 1
    with pytest.raises(WouldBlock):
        budget.acquire_nowait(10)  # it fits, but would pass the waiter
    budget.release(held.pop())  # the waiter is served first ...
    assert await waiting == 50
    assert budget.acquire_nowait(10) == 10  # ... then the next one


def test_acquire_forced_counts_what_is_already_in_memory_even_past_the_capacity() -> None:
    budget = ByteBudget(1000, large_share=1.0)
    token = budget.acquire_nowait(900)
    extra = budget.acquire_forced(300)  # an answer that must be sent: never refused
    assert budget.in_use == 1200 and budget.peak == 1200
    assert not budget.fits(1)
    with pytest.raises(WouldBlock):
        budget.acquire_nowait(1)
    budget.release(extra)
    budget.release(token)
    assert budget.in_use == 0 and budget.peak == 1200


async def test_shrink_keeps_the_encoded_size_and_lets_the_waiters_in() -> None:
    budget = ByteBudget(1000, large_share=1.0)
    reservation = budget.acquire_nowait(800)  # what an answer may hold
    waiting = asyncio.ensure_future(budget.acquire(800))
    await until(lambda: budget.waiting == 1, "the request to queue")
    assert budget.waiting == 1
    kept = budget.shrink(reservation, 150)  # what it holds once encoded
    assert kept == -150 and budget.in_use == 950  # 150 kept + 800 granted to the waiter
    assert await waiting == -800
    assert budget.shrink(kept, 400) == kept  # never grows
    budget.release(kept)
    assert budget.in_use == 800


def test_a_reservation_larger_than_the_capacity_fits_an_empty_budget() -> None:
    budget = ByteBudget(100, large_share=1.0)  # a share smaller than one answer
    token = budget.acquire_nowait(5000)
    assert budget.in_use == 100  # one always may
    with pytest.raises(WouldBlock):
        budget.acquire_nowait(1)
    budget.release(token)
    assert budget.in_use == 0


async def test_byte_budget_bounds_and_reserves_room_for_small_requests() -> None:
    budget = ByteBudget(1600)  # large: >= 100 bytes, at most 800 together
    big = [await budget.acquire(500)]
    waiting = asyncio.ensure_future(budget.acquire(500))
    await until(lambda: budget.waiting == 1, "the second large request to queue")
    assert not waiting.done() and budget.large_in_use == 500
    small = [await budget.acquire(50) for _ in range(10)]  # small ones still get through
    assert budget.in_use == 1000
    budget.release(big[0])
    assert await waiting < 0 and budget.large_in_use == 500
    for token in small:
        budget.release(token)
    budget.release(await waiting)
    assert budget.in_use == 0 and budget.large_in_use == 0


# -- Permits: a connection's in-flight window ---------------------------------------------


async def full_window_with_a_waiter() -> tuple[Permits, asyncio.Future[None]]:
    """A window of one slot, taken, and a task waiting for it."""
    window = Permits(1)
    window.acquire_nowait()
    waiting = asyncio.ensure_future(window.acquire())
    await until(lambda: window.waiting == 1, "the task to wait for the slot")
    assert window.waiting == 1 and not waiting.done()
    return window, waiting


def test_acquire_nowait_until_none_is_free_then_release_frees_one() -> None:
    window = Permits(2)
    window.acquire_nowait()
    window.acquire_nowait()
    assert window.in_use == window.count
    with pytest.raises(WouldBlock):
        window.acquire_nowait()
    window.release()
    assert window.in_use == 1
    window.acquire_nowait()


async def test_a_waiting_reader_is_handed_the_released_slot() -> None:
    window, waiting = await full_window_with_a_waiter()
    window.release()  # handed over: not counted free
    await waiting
    assert window.in_use == 1
    window.release()
    assert window.in_use == 0


async def test_acquire_takes_a_free_slot_at_once() -> None:
    window = Permits(1)
    await window.acquire()
    assert window.in_use == 1 and window.waits == 0


async def test_a_cancelled_waiter_leaves_the_slot_free() -> None:
    window, waiting = await full_window_with_a_waiter()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert window.waiting == 0
    window.release()
    assert window.in_use == 0


async def test_a_waiter_cancelled_after_the_hand_over_gives_the_slot_back() -> None:
    window, waiting = await full_window_with_a_waiter()
    window.release()  # handed over ...
    waiting.cancel()  # ... and cancelled before the waiter ran
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert window.in_use == 0


async def test_waiters_are_served_in_arrival_order() -> None:
    window, first = await full_window_with_a_waiter()
    second = asyncio.ensure_future(window.acquire())
    await until(lambda: window.waiting == 2, "two waiters to queue")
    assert window.waits == 2
    window.release()
    await first
    assert not second.done() and window.in_use == 1
    window.release()
    await second
    assert window.in_use == 1 and window.peak == 1


async def test_a_waiter_cancelled_while_queued_passes_the_slot_on() -> None:
    """Cancelled, then the slot is released before the cancelled task ran: the slot goes
    to the next waiter, not to the cancelled one."""
    window, first = await full_window_with_a_waiter()
    second = asyncio.ensure_future(window.acquire())
    await until(lambda: window.waiting == 2, "two waiters to queue")
    first.cancel()
    window.release()
    with pytest.raises(asyncio.CancelledError):
        await first
    await until(second.done, "the second waiter to be served")
    assert window.in_use == 1 and window.waiting == 0


def test_at_least_one_slot() -> None:
    with pytest.raises(ValueError, match="count"):
        Permits(0)


# -- Permits: the large-frame permits (granted to protocol callbacks) ---------------------


def test_callbacks_are_granted_in_arrival_order_and_may_withdraw() -> None:
    permits = Permits(1)
    permits.acquire_nowait()
    granted: list[str] = []
    for key in ("a", "b", "c"):
        permits.acquire_later(key, lambda key=key: granted.append(key))
    assert permits.waiting == 3 and permits.waits == 3
    permits.cancel_acquire("b")  # the connection stopped receiving
    permits.cancel_acquire("b")  # nothing when not queued
    with pytest.raises(WouldBlock):
        permits.acquire_nowait()  # a permit is never taken past a waiter
    permits.release()
    assert granted == ["a"] and permits.in_use == 1
    permits.release()
    assert granted == ["a", "c"] and permits.waiting == 0
    permits.release()
    assert permits.in_use == 0 and permits.peak == 1


# -- properties: never past the bound, nothing leaked -------------------------------------

OPS = st.lists(
    st.tuples(st.sampled_from(["nowait", "wait", "release", "cancel", "step"]), st.integers(0, 9)),
    max_size=60,
)


async def _drive(
    ops: list[tuple[str, int]],
    acquire_nowait: Callable[[int], int | None],
    acquire: Callable[[int], Awaitable[int | None]],
    release: Callable[[int | None], None],
    check: Callable[[], None],
) -> None:
    """Run a random sequence of acquisitions, waits, releases, cancellations and turns of
    the loop (so waiters run at random points: a waiter may be cancelled after it was
    granted, before it ran), checking the bound after every step; then cancel the
    waiters and release everything held."""
    held: list[int | None] = []
    tasks: list[asyncio.Future[int | None]] = []
    for op, n in ops:
        if op == "nowait":
            with contextlib.suppress(WouldBlock):
                held.append(acquire_nowait(n))
        elif op == "wait":
            tasks.append(asyncio.ensure_future(acquire(n)))
        elif op == "release" and held:
            release(held.pop(n % len(held)))
        elif op == "cancel" and tasks:
            tasks[n % len(tasks)].cancel()
        elif op == "step":
            await asyncio.sleep(0)
        for task in [t for t in tasks if t.done()]:
            tasks.remove(task)
            if not task.cancelled():
                held.append(task.result())
        check()
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            held.append(await task)
    for token in held:
        release(token)
    check()


@settings(max_examples=500, deadline=None)
@given(count=st.integers(1, 4), ops=OPS)
def test_permits_never_exceed_the_count_and_never_leak(
    count: int, ops: list[tuple[str, int]]
) -> None:
    permits = Permits(count)

    def check() -> None:
        assert 0 <= permits.in_use <= count
        assert permits.peak <= count

    async def run() -> None:
        await _drive(
            ops,
            lambda _n: permits.acquire_nowait(),
            lambda _n: permits.acquire(),
            lambda _token: permits.release(),
            check,
        )

    asyncio.run(run())
    assert permits.in_use == 0 and permits.waiting == 0


@settings(max_examples=500, deadline=None)
@given(capacity=st.integers(16, 200), ops=OPS)
def test_a_byte_budget_never_exceeds_its_capacity_and_never_leaks(
    capacity: int, ops: list[tuple[str, int]]
) -> None:
    budget = ByteBudget(capacity)

    def size(n: int) -> int:
        return n * capacity // 6  # small and large requests, some over the large share

    def check() -> None:
        assert 0 <= budget.in_use <= capacity
        assert 0 <= budget.large_in_use <= budget.large_limit

    async def run() -> None:
        await _drive(
            ops,
            lambda n: budget.acquire_nowait(size(n)),
            lambda n: budget.acquire(size(n)),
            budget.release,
            check,
        )

    asyncio.run(run())
    assert budget.in_use == 0 and budget.large_in_use == 0 and budget.waiting == 0
