"""Metrics and tokens (issue 13, item 8): a token limited to some agents sees only the
series of its own agents, on ``GET /metrics`` and in ``metrics.get``; the count of
unreadable rows skipped is exported. Real server, real sockets, real SQLite files."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from session_server.client import SessionClient
from session_server.storage.stored_rows import SKIPPED_RECORDS
from tests.support.plain_http import http_get
from tests.support.server import running_server, turn_messages

TOKENS = ["root-token", "team-a:a-*:admin"]


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def agent_ids(text: str) -> set[str]:
    return set(re.findall(r'agent_id="([^"]+)"', text))


async def test_a_token_limited_to_agents_sees_only_their_metrics(tmp_path: Path) -> None:
    async with running_server(tmp_path / "memory", tokens=TOKENS) as running:
        for agent in ("a-1", "b-1"):
            async with SessionClient(running.url, agent, token="root-token") as client:
                await client.create_session(session_id="s")
        everything = await http_get(running.url, "/metrics", bearer("root-token"))
        assert everything.status == 200
        assert agent_ids(everything.body) == {"a-1", "b-1"}
        assert "session_server_requests_total{" in everything.body
        assert "\nsession_server_open_agents 2.0\n" in everything.body

        scoped = await http_get(running.url, "/metrics", bearer("team-a"))
        assert scoped.status == 200
        assert agent_ids(scoped.body) == {"a-1"}
        assert 'session_server_agent_open{agent_id="a-1"} 1.0' in scoped.body
        # Nothing server-wide: those figures count other agents' traffic.
        samples = [line for line in scoped.body.splitlines() if not line.startswith("#")]
        assert samples and all('agent_id="a-1"' in line for line in samples), samples

        async with SessionClient(running.url, None, token="team-a") as client:
            assert await client.get_metrics() == {"open_agents": 1, "agents": ["a-1"]}
        async with SessionClient(running.url, None, token="root-token") as client:
            full = await client.get_metrics()
            assert full["open_agents"] == 2 and sorted(full["agents"]) == ["a-1", "b-1"]
            assert "compactions" in full


async def test_skipped_records_are_exported(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    async with running_server(memory) as running, SessionClient(running.url, "agent") as client:
        await client.create_session(session_id="s")
        for n in range(2):
            await client.persist_turn("s", turn_messages(n))
    db = sqlite3.connect(memory / "agents" / "agent" / "agent.sqlite")
    with db:  # one row corrupted behind the server's back
        db.execute("UPDATE events SET metadata = '{not json' WHERE session_id = 's' AND seq = 2")
    db.close()
    before = SKIPPED_RECORDS.count
    async with running_server(memory) as running, SessionClient(running.url, "agent") as client:
        assert len(await client.load_events("s", limit=None)) == 7
        assert SKIPPED_RECORDS.count > before
        answer = await http_get(running.url, "/metrics")
        exported = re.search(r"^session_server_skipped_records (\S+)$", answer.body, re.M)
        assert exported is not None, answer.body[:2000]
        assert float(exported.group(1)) == SKIPPED_RECORDS.count
        async with SessionClient(running.url, None) as admin:
            assert (await admin.get_metrics())["skipped_records"] == SKIPPED_RECORDS.count
