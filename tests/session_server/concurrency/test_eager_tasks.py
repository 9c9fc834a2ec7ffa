"""``create_task_eagerly``: asyncio's eager tasks on 3.12+, plain tasks on 3.11, on both loops."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from session_server.concurrency.eager_tasks import EAGER_TASKS, create_task_eagerly

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


def test_eager_exactly_where_asyncio_has_eager_tasks() -> None:
    assert EAGER_TASKS is (sys.version_info >= (3, 12))
    assert EAGER_TASKS is hasattr(asyncio, "eager_task_factory")


@pytest.mark.parametrize("make_loop", LOOPS)
def test_the_first_step_runs_in_the_caller_only_with_eager_tasks(
    make_loop: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    steps: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        gate: asyncio.Future[str] = loop.create_future()

        async def body() -> str:
            steps.append("first")
            got = await gate
            steps.append(f"then {got}")
            return got.upper()

        task = create_task_eagerly(loop, body())
        assert steps == (["first"] if EAGER_TASKS else [])
        assert not task.done()
        gate.set_result("go")
        assert await task == "GO"
        assert steps == ["first", "then go"]

    run(make_loop, main())


@pytest.mark.parametrize("make_loop", LOOPS)
def test_a_coroutine_that_never_waits_gives_its_result_through_the_task(
    make_loop: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    async def body() -> int:
        return 1

    async def main() -> None:
        task = create_task_eagerly(asyncio.get_running_loop(), body())
        assert task.done() is EAGER_TASKS  # ended in its first step, in the caller's
        assert await task == 1

    run(make_loop, main())


@pytest.mark.parametrize("make_loop", LOOPS)
def test_exceptions_are_the_tasks_whether_raised_before_or_after_the_first_wait(
    make_loop: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        gate: asyncio.Future[None] = loop.create_future()

        async def at_once() -> None:
            raise ValueError("first step")

        async def later() -> None:
            await gate
            raise KeyError("second step")

        first = create_task_eagerly(loop, at_once())  # nothing raised here
        second = create_task_eagerly(loop, later())
        gate.set_result(None)
        with pytest.raises(ValueError, match="first step"):
            await first
        with pytest.raises(KeyError, match="second step"):
            await second

    run(make_loop, main())


@pytest.mark.parametrize("make_loop", LOOPS)
def test_the_task_is_current_in_every_step(
    make_loop: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    # ``asyncio.timeout`` and ``TaskGroup`` ask for the current task: in the first step
    # too (the hand-written trampoline this replaced ran it under the caller's task).
    seen: list[asyncio.Task[Any] | None] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        gate: asyncio.Future[None] = loop.create_future()

        async def body() -> None:
            seen.append(asyncio.current_task())
            async with asyncio.timeout(30):
                await gate
            seen.append(asyncio.current_task())

        task = create_task_eagerly(loop, body())
        gate.set_result(None)
        await task
        assert seen == [task, task]

    run(make_loop, main())
