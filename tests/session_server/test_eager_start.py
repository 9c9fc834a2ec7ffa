"""``start_eagerly``: the first step runs in the caller, the rest in a task, on both loops."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from session_server.eager_start import start_eagerly

LOOPS: list[Callable[[], asyncio.AbstractEventLoop]] = [
    asyncio.new_event_loop,
    uvloop.new_event_loop,
]


def run(
    make_loop: Callable[[], asyncio.AbstractEventLoop], main: Coroutine[Any, Any, None]
) -> None:
    loop = make_loop()
    try:
        loop.run_until_complete(main)
    finally:
        loop.close()


@pytest.mark.parametrize("make_loop", LOOPS)
def test_a_coroutine_that_never_waits_runs_whole_and_gives_no_task(
    make_loop: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    steps: list[str] = []

    async def body() -> int:
        steps.append("ran")
        return 1

    async def main() -> None:
        assert start_eagerly(asyncio.get_running_loop(), body()) is None
        assert steps == ["ran"]

    run(make_loop, main())


@pytest.mark.parametrize("make_loop", LOOPS)
def test_the_first_step_runs_before_the_call_returns_and_the_rest_in_the_task(
    make_loop: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    steps: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        gate: asyncio.Future[str] = loop.create_future()

        async def body() -> str:
            steps.append("first")
            got = await gate  # the value the future gives reaches the coroutine
            steps.append(f"then {got}")
            await asyncio.sleep(0)  # a bare yield passes through too
            return got.upper()

        task = start_eagerly(loop, body())
        assert steps == ["first"]
        assert task is not None and not task.done()
        gate.set_result("go")
        assert await task == "GO"
        assert steps == ["first", "then go"]

    run(make_loop, main())


@pytest.mark.parametrize("make_loop", LOOPS)
def test_the_first_step_runs_ahead_of_tasks_already_scheduled(
    make_loop: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    order: list[str] = []

    async def note(name: str) -> None:
        order.append(name)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        created = loop.create_task(note("created"))
        start_eagerly(loop, note("eager"))
        await created
        assert order == ["eager", "created"]

    run(make_loop, main())


@pytest.mark.parametrize("make_loop", LOOPS)
def test_a_cancellation_reaches_the_coroutine_where_it_waits(
    make_loop: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        waited: asyncio.Future[None] = loop.create_future()
        cleanup: list[str] = []

        async def body() -> str:
            try:
                await waited
            except asyncio.CancelledError:
                cleanup.append("cancelled")
                # It may go on waiting after it caught the cancellation.
                await asyncio.sleep(0)
                return "caught"
            return "not cancelled"

        task = start_eagerly(loop, body())
        assert task is not None
        await asyncio.sleep(0)
        task.cancel()
        assert await task == "caught"
        assert waited.cancelled(), "the task cancels what the coroutine waits for"
        assert cleanup == ["cancelled"]

        plain = start_eagerly(loop, asyncio.sleep(3600))
        assert plain is not None
        plain.cancel()
        with pytest.raises(asyncio.CancelledError):
            await plain

    run(make_loop, main())


@pytest.mark.parametrize("make_loop", LOOPS)
def test_exceptions_are_the_tasks_whether_raised_before_or_after_the_first_wait(
    make_loop: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    async def at_once() -> None:
        raise ValueError("first step")

    async def later() -> None:
        await asyncio.sleep(0)
        raise KeyError("second step")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        first = start_eagerly(loop, at_once())  # nothing raised here, as with create_task
        second = start_eagerly(loop, later())
        assert first is not None and second is not None
        with pytest.raises(ValueError, match="first step"):
            await first
        with pytest.raises(KeyError, match="second step"):
            await second

    run(make_loop, main())


@pytest.mark.parametrize("make_loop", LOOPS)
def test_after_the_first_wait_the_task_is_the_current_one(
    make_loop: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    seen: list[asyncio.Task[Any] | None] = []

    async def body() -> None:
        await asyncio.sleep(0)
        seen.append(asyncio.current_task())

    async def main() -> None:
        task = start_eagerly(asyncio.get_running_loop(), body())
        assert task is not None
        await task
        assert seen == [task]

    run(make_loop, main())


@pytest.mark.parametrize("make_loop", LOOPS)
def test_a_task_cancelled_before_its_first_step_cancels_what_the_coroutine_waits_for(
    make_loop: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    # Found in review: thrown into the trampoline before it started, the cancellation
    # ended the task and never reached the coroutine (its ``finally`` never ran, the
    # future it waited on stayed live).
    async def main() -> None:
        loop = asyncio.get_running_loop()
        gate: asyncio.Future[None] = loop.create_future()
        seen: list[str] = []

        async def body() -> None:
            try:
                await gate
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise
            finally:
                seen.append("finally")

        task = start_eagerly(loop, body())
        assert task is not None
        task.cancel()  # in the same step: the task has not run a step of its own
        with pytest.raises(asyncio.CancelledError):
            await task
        assert gate.cancelled()
        assert seen == ["cancelled", "finally"]

    run(make_loop, main())
