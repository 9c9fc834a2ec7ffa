"""Memory blocks across SIGKILL: an answered write survives, an answered delete leaves
no trace in any file (SQLite, WAL, mirror, snapshot), with a real server process."""

from __future__ import annotations

from pathlib import Path

from session_server.client import SessionClient
from tests.support.server import ServerProcess, turn_messages

AGENT = "crash-blocks"
SECRET = "ZEBRA-7731-launch"


async def test_answered_writes_survive_and_deletes_leave_no_trace(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    server = ServerProcess(memory)
    server.start()
    try:
        async with SessionClient(server.url, AGENT) as client:
            sid = await client.create_session(session_id="s1")
            await client.set_block("codes", SECRET, description="never keep this")
            await client.set_block("codes", SECRET + " (confirmed)")
            await client.set_block("task", "kept after the crash", session_id=sid)
            # A turn whose context held the block: its snapshot and traces are written.
            ctx = await client.build_context(sid)
            assert SECRET in "\n".join(ctx.system_instructions)
            await client.persist_turn(sid, turn_messages(1), base_seq=ctx.base_seq)
            await client.call("memory.view", {"session_id": sid})
            assert await client.delete_block("codes") is True
            server.kill()  # SIGKILL right after the answer
    finally:
        server.kill()
    for path in memory.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    again = ServerProcess(memory)
    again.start()
    try:
        async with SessionClient(again.url, AGENT) as client:
            assert (await client.get_block("task", session_id="s1"))["value"] == (
                "kept after the crash"
            )
            assert [b["label"] for b in await client.list_blocks(session_id="s1")] == ["task"]
            built = await client.build_context("s1")
            assert "kept after the crash" in "\n".join(built.system_instructions)
    finally:
        again.kill()
