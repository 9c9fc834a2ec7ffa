"""``RetentionSweeper``: the registry's background retention pass (I/O shell).

Every ``interval`` seconds it walks the agents on disk, one at a time, and asks each
actor to apply its retention policies (``AgentActor.sweep_retention``) in at most
``steps`` mailbox steps per agent and pass; an agent with more to erase is finished by
the next passes. Each step is a write of the agent's own mailbox (one session, or one
page of events), so clients of the same agent queue between steps and other agents are
untouched. A failure of one agent is logged and the pass goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

from ..values.errors import SessionServerError

__all__ = ["DEFAULT_STEPS", "RetentionSweeper"]

log = logging.getLogger(__name__)

DEFAULT_STEPS: Final = 200


class _Sweepable(Protocol):
    async def sweep_retention(
        self, *, now_ms: int | None = None, max_steps: int | None = None
    ) -> dict[str, Any]: ...


class RetentionSweeper:
    """The background pass of the module docstring."""

    def __init__(
        self,
        list_agents: Callable[[], Awaitable[list[str]]],
        actor_of: Callable[[str], Awaitable[_Sweepable]],
        interval: float,
        steps: int = DEFAULT_STEPS,
    ) -> None:
        if interval <= 0:
            raise ValueError("retention_interval: must be above 0 seconds")
        self._list_agents = list_agents
        self._actor_of = actor_of
        self.interval = interval
        self.steps = steps
        self._task: asyncio.Task[None] | None = None
        self.passes = 0

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.sweep_all()

    async def sweep_all(self, now_ms: int | None = None) -> dict[str, int]:
        """One pass over every agent; ``{sessions, events, agents_unfinished}``."""
        totals = {"sessions": 0, "events": 0, "agents_unfinished": 0}
        for agent_id in await self._list_agents():
            try:
                actor = await self._actor_of(agent_id)
                done = await actor.sweep_retention(now_ms=now_ms, max_steps=self.steps)
            except SessionServerError as exc:
                log.warning("retention sweep of agent %r failed: %s", agent_id, exc)
                continue
            totals["sessions"] += done["sessions"]
            totals["events"] += done["events"]
            totals["agents_unfinished"] += int(done["more"])
        self.passes += 1
        return totals
