"""``InflightWindow``: a connection's in-flight slots (``inflight_window``)."""

from __future__ import annotations

import asyncio

import pytest

from session_server.inflight_window import InflightWindow
from tests.support.waiting import until


async def full_window_with_a_waiter() -> tuple[InflightWindow, asyncio.Future[None]]:
    """A window of one slot, taken, and a task waiting for it."""
    window = InflightWindow(1)
    assert window.take()
    waiting = asyncio.ensure_future(window.wait())
    await until(lambda: window._waiter is not None, "the task to wait for a slot")
    assert not waiting.done()
    return window, waiting


def test_take_until_none_is_free_then_release_frees_one() -> None:
    window = InflightWindow(2)
    assert window.take() and window.take()
    assert window.locked() and not window.take()
    window.release()
    assert not window.locked() and window.take()


async def test_a_waiting_reader_is_handed_the_released_slot() -> None:
    window, waiting = await full_window_with_a_waiter()
    window.release()  # handed over: not counted free
    await waiting
    assert window.locked()
    window.release()
    assert window.free == 1


async def test_wait_takes_a_free_slot_at_once() -> None:
    window = InflightWindow(1)
    await window.wait()
    assert window.locked()


async def test_a_cancelled_waiter_leaves_the_slot_free() -> None:
    window, waiting = await full_window_with_a_waiter()
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    window.release()
    assert window.free == 1


async def test_a_waiter_cancelled_after_the_hand_over_gives_the_slot_back() -> None:
    window, waiting = await full_window_with_a_waiter()
    window.release()  # handed over ...
    waiting.cancel()  # ... and cancelled before the waiter ran
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert window.free == 1


async def test_one_waiter_at_a_time() -> None:
    window, first = await full_window_with_a_waiter()
    with pytest.raises(RuntimeError, match="another task"):
        await window.wait()
    first.cancel()


def test_at_least_one_slot() -> None:
    with pytest.raises(ValueError, match="size"):
        InflightWindow(0)
