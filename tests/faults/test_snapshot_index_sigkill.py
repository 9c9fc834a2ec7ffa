"""The snapshot index across a SIGKILL of a real server process (issue 13, item 5).

A session delete commits its tombstone before its own transaction, and the folder is
removed after the answer: a SIGKILL in between leaves the folder. Here the folder is put
back after the kill (what such a kill leaves), and the restarted server, which finds its
index unclean and rebuilds it, still does not list the deleted session, while a session
written after the last listing and never listed before the kill is listed.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from session_server.client import SessionClient
from session_server.values.events import ContextMessage
from tests.support.server import ServerProcess

AGENT = "agent"


async def listing(url: str) -> list[tuple[str, str]]:
    async with SessionClient(url, None) as admin:
        page = await admin.call("memory.list_snapshots", {"page_size": 100})
    return sorted((e["agent_id"], e["session_id"]) for e in page["entries"])


async def test_a_deleted_session_stays_unlisted_after_sigkill(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    sessions = memory / "agents" / AGENT / "sessions"
    server = ServerProcess(memory)
    url = await asyncio.to_thread(server.start)
    try:
        async with SessionClient(url, AGENT) as client:
            for sid in ("s1", "s2"):
                await client.create_session(session_id=sid)
                await client.persist_turn(sid, [ContextMessage(role="user", content=sid)])
            assert await listing(url) == [(AGENT, "s1"), (AGENT, "s2")]
            kept = tmp_path / "s1-copy"
            shutil.copytree(sessions / "s1", kept)
            assert (await client.call("session.delete", {"session_id": "s1"}))["deleted"]
            await client.create_session(session_id="s3")
            await client.persist_turn("s3", [ContextMessage(role="user", content="s3")])
            # Answered: the mirror of s3 is written within the mirror delay (50 ms); a
            # view drains it, so the files are there before the kill.
            await client.call("memory.view", {"session_id": "s3"})
        server.kill()  # SIGKILL: the index file stays marked unclean
    finally:
        server.kill()
    shutil.rmtree(sessions / "s1", ignore_errors=True)
    shutil.copytree(kept, sessions / "s1")  # the folder a kill before its removal leaves

    server = ServerProcess(memory)
    url = await asyncio.to_thread(server.start)
    try:
        assert await listing(url) == [(AGENT, "s2"), (AGENT, "s3")]
        # A new session under the deleted id is listed again once written.
        async with SessionClient(url, AGENT) as client:
            await client.create_session(session_id="s1")
            await client.persist_turn("s1", [ContextMessage(role="user", content="again")])
        assert await listing(url) == [(AGENT, "s1"), (AGENT, "s2"), (AGENT, "s3")]
        assert await asyncio.to_thread(server.terminate, 30.0) == 0
    finally:
        server.kill()
    # A clean stop saved the index: the next start lists without a rebuild, the same.
    server = ServerProcess(memory)
    url = await asyncio.to_thread(server.start)
    try:
        assert await listing(url) == [(AGENT, "s1"), (AGENT, "s2"), (AGENT, "s3")]
        assert "rebuilding the snapshot index" not in server.stderr_text
    finally:
        server.kill()
