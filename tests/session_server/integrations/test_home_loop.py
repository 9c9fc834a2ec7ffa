"""integrations.home_loop: calls from any loop run on the loop the registry belongs to."""

from __future__ import annotations

import asyncio
import threading

import pytest

from session_server.integrations.home_loop import HomeLoop


async def where() -> asyncio.AbstractEventLoop:
    return asyncio.get_running_loop()


async def test_calls_from_other_loops_run_on_the_home_loop() -> None:
    home = HomeLoop()  # made on this (the registry's) loop
    here = asyncio.get_running_loop()
    assert await home.run(where()) is here
    seen: list[asyncio.AbstractEventLoop] = []

    def elsewhere() -> None:  # Runner.run_sync: a new loop per call, on another thread
        seen.append(asyncio.run(home.run(where())))
        seen.append(asyncio.run(home.run(where())))

    await asyncio.to_thread(elsewhere)
    assert seen == [here, here]


def test_made_outside_a_loop_the_first_callers_loop_is_home() -> None:
    home = HomeLoop()
    assert home.loop is None
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        first = asyncio.run_coroutine_threadsafe(home.run(where()), loop).result(30)
        assert first is loop and home.loop is loop
        assert asyncio.run(home.run(where())) is loop  # a later caller is sent there
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
    loop.close()
    call = where()
    with pytest.raises(RuntimeError):
        asyncio.run(home.run(call))
    assert call.cr_frame is None  # closed, never left pending
