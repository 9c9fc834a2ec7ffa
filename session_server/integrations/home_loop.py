"""Run a coroutine on the event loop a registry's actors belong to, from any loop.

The in-process integrations (the Agents SDK session, the ADK services) are called from
whatever loop the framework runs: ``Runner.run_sync`` makes a new loop per call, and a
web framework may run the agent on a worker thread's loop. The registry's actors, stores
and locks belong to the loop they were made on, so every call is sent there
(``asyncio.run_coroutine_threadsafe``) and awaited from the caller's loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["HomeLoop"]

T = TypeVar("T")


class HomeLoop:
    """The registry's loop: the running loop when made, else the first caller's."""

    def __init__(self) -> None:
        try:
            self.loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:  # made outside a loop: the first call's loop is the registry's
            self.loop = None

    async def run(self, call: Coroutine[Any, Any, T]) -> T:
        """Await ``call`` on the home loop (directly when the caller is on it). A closed
        home loop raises ``RuntimeError`` and the coroutine is closed, never left pending."""
        here = asyncio.get_running_loop()
        if self.loop is None:
            self.loop = here
        if self.loop is here:
            return await call
        try:
            future = asyncio.run_coroutine_threadsafe(call, self.loop)
        except RuntimeError:  # the home loop is closed
            call.close()
            raise
        return await asyncio.wrap_future(future)
