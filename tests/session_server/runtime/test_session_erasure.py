"""``delete_sessions``: many sessions erased in one transaction exactly as
``session.delete`` erases one (real files: SQLite, WAL, mirror folders, search index,
memory blocks, usage, subscribers)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from session_server import ActorRegistry
from session_server.values.context import WorkingContext
from session_server.values.events import ContextMessage

AGENT = "erasure"
SECRET = "zebracorn"


def turn(sid: str, n: int) -> WorkingContext:
    ctx = WorkingContext()
    ctx.add_message(ContextMessage(role="user", content=f"{SECRET} {sid} question {n}"))
    ctx.add_message(ContextMessage(role="assistant", content=f"answer {n}"))
    return ctx


async def test_a_batch_erases_every_trace_of_its_sessions(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get(AGENT)
        sids = [await actor.create_session(session_id=f"s{i}") for i in range(6)]
        for sid in sids:
            for n in range(2):
                await actor.persist_working_context(
                    sid, turn(sid, n), usage={"input_tokens": 10, "output_tokens": 2}, model="m"
                )
            await actor.set_block("notes", f"{SECRET} block", session_id=sid)
        await actor.recall_settled()
        assert len((await actor.search(SECRET, limit=50))["hits"]) > 0
        told: list[str] = []
        for sid in sids:
            actor.subscribe(sid, lambda events: None, on_deleted=lambda s=sid: told.append(s))
        await actor.mirror_settled()
        folders = tmp_path / "agents" / AGENT / "sessions"
        assert all((folders / sid).is_dir() for sid in sids)

        gone = await actor.delete_sessions([*sids[:4], "unknown", sids[0]])
        assert gone == sids[:4]  # the ids that existed, each once
        assert sorted(told) == sids[:4]
        assert not any((folders / sid).exists() for sid in sids[:4])
        assert all((folders / sid).is_dir() for sid in sids[4:])
        hits = (await actor.search(SECRET, limit=50))["hits"]
        assert {h["session_id"] for h in hits} == set(sids[4:])
        usage = await actor.memory_usage(group_by="session")
        assert [g["key"] for g in usage["groups"]] == sids[4:]
        assert usage["totals"]["turns"] == 4
        assert await actor.get_session(sids[0]) is None
        assert await actor.delete_sessions([]) == []
    path = tmp_path / "agents" / AGENT / "agent.sqlite"
    conn = sqlite3.connect(path)
    try:
        for table in ("events", "session_days", "tool_calls", "memory_blocks", "idempotency"):
            rows = conn.execute(
                f"SELECT COUNT(*) FROM {table} WHERE session_id IN ('s0', 's1', 's2', 's3')"
            ).fetchone()[0]
            assert rows == 0, table
    finally:
        conn.close()
    # secure delete and the truncated WAL: the erased sessions' text is in no file
    data = path.read_bytes()
    wal = path.with_name(path.name + "-wal")
    data += wal.read_bytes() if wal.exists() else b""
    for sid in sids[:4]:
        assert f"{SECRET} {sid} question".encode() not in data
    assert f"{SECRET} s4 question".encode() in data
