"""``SessionServerSession(url=[...])``: the Agents SDK session over a list of node URLs
(the first that answers is used)."""

from __future__ import annotations

from pathlib import Path

from session_server.integrations.openai_agents import SessionServerSession
from tests.support.server import free_port, running_server


async def test_a_session_given_several_urls_uses_the_one_that_answers(tmp_path: Path) -> None:
    dead = f"ws://127.0.0.1:{free_port()}"
    async with running_server(tmp_path) as live:
        session = SessionServerSession(
            "user-urls", url=[dead, live.url], agent_id="sdk-urls", reconnect_budget=5
        )
        try:
            await session.add_items([{"role": "user", "content": "hello"}])
            items = await session.get_items()
        finally:
            await session.aclose()
    assert [item.get("content") for item in items] == ["hello"]
