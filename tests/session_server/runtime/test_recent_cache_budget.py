"""The recent caches of a registry's actors share its byte budget (real registry and
SQLite files): writes to several agents keep the total within it, the newest sessions
stay cached, and a hibernated agent gives its bytes back."""

from __future__ import annotations

from pathlib import Path

from session_server.runtime.registry import ActorRegistry
from session_server.values.events import SessionEvent

KIB = 1024


async def test_agents_share_the_budget_and_hibernation_frees_their_part(tmp_path: Path) -> None:
    budget = 256 * KIB  # a session holds at most 32 KiB: two of these events
    async with ActorRegistry(
        tmp_path, idle_timeout=None, mirror=False, recent_cache_bytes=budget
    ) as reg:
        sessions = []
        for agent_id in ("a1", "a2", "a3"):
            actor = await reg.get(agent_id)
            for _ in range(4):
                sid = await actor.create_session()
                await actor.view(sid, 10)  # its window is cached from now on
                for n in range(3):
                    await actor.append_events(sid, [SessionEvent(content=f"{n}" * 12 * KIB)])
                    assert reg.cache_budget.held <= budget
                sessions.append((actor, sid))
        held = reg.cache_budget.held
        assert 0 < held <= budget and reg.cache_budget.peak > budget
        # The last session written is cached (its newest events), and its window equals
        # what the store gives.
        actor, sid = sessions[-1]
        warm = actor.core.cached_view(sid, 1)
        assert warm is not None and warm.events[-1].content == "2" * 12 * KIB
        cold = await actor.load_events(sid, limit=None)
        assert [e.id for e in warm.events] == [e.id for e in cold[-len(warm.events) :]]
        # Hibernating every agent empties their caches: the budget holds nothing.
        assert await reg.hibernate_idle(older_than=0) == 3
        assert reg.cache_budget.held == 0 and reg.cache_budget._caches == {}
