"""A server killed with SIGKILL in the middle of a retention sweep leaves every session
whole or gone: no event, usage row or mirror folder of an erased session, no partial
session, daily totals equal to the turns kept; the next sweep finishes the job."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from session_server import ActorRegistry
from session_server.runtime.retention_keeper import FIRST_BATCH
from session_server.values.context import WorkingContext
from session_server.values.events import ContextMessage
from tests.support.waiting import until

ROOT = Path(__file__).resolve().parents[3]
AGENT = "swept"
SESSIONS = 400  # batches grow (8, 16, 32, ...): enough left to kill the sweep mid-way
TURNS = 2


def count(db: Path, sql: str) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute(sql).fetchone()[0])
    finally:
        conn.close()


async def fill(memory: Path) -> None:
    async with ActorRegistry(memory, idle_timeout=None) as reg:
        actor = await reg.get(AGENT)
        for i in range(SESSIONS):
            sid = await actor.create_session(session_id=f"s{i:03d}")
            for n in range(TURNS):
                ctx = WorkingContext()
                ctx.add_message(ContextMessage(role="user", content=f"q {i} {n}"))
                ctx.add_message(ContextMessage(role="assistant", content=f"a {i} {n}"))
                await actor.persist_working_context(
                    sid, ctx, usage={"prompt_tokens": 100 + i, "completion_tokens": 7}, model="m"
                )
        await actor.retention_set({"max_idle_days": 1e-9})


def check_whole_or_gone(db: Path, memory: Path) -> set[str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        kept = {r[0] for r in conn.execute("SELECT id FROM sessions")}
        for table in ("events", "session_days", "tool_calls", "idempotency"):
            orphans = conn.execute(
                f"SELECT COUNT(*) FROM {table} WHERE session_id NOT IN (SELECT id FROM sessions)"
            ).fetchone()[0]
            assert orphans == 0, f"{table}: {orphans} rows of erased sessions"
        for sid in kept:
            events = conn.execute("SELECT COUNT(*) FROM events WHERE session_id = ?", (sid,))
            assert events.fetchone()[0] == 2 * TURNS, sid
            usage = conn.execute(
                "SELECT COUNT(*) FROM events WHERE session_id = ? AND usage IS NOT NULL", (sid,)
            )
            assert usage.fetchone()[0] == TURNS, sid
        # the agent's days (closed days plus each session's open day) count exactly the
        # turns of the sessions left
        closed = conn.execute(
            "SELECT COALESCE(SUM(input_tokens), 0), COALESCE(SUM(turns), 0) FROM usage_days"
        ).fetchone()
        open_days = [0, 0]
        for (text,) in conn.execute("SELECT usage FROM sessions WHERE usage IS NOT NULL"):
            for counts in json.loads(text)["p"].values():
                open_days[0] += counts[0]
                open_days[1] += counts[5]
        turns = conn.execute(
            "SELECT COALESCE(SUM(json_extract(usage, '$[0]')), 0), COUNT(*) FROM events"
            " WHERE usage IS NOT NULL"
        ).fetchone()
        assert (closed[0] + open_days[0], closed[1] + open_days[1]) == turns
    finally:
        conn.close()
    return kept


# Killed once the first batch committed, or once a later (larger) batch did.
@pytest.mark.parametrize("erased", [1, FIRST_BATCH + 1])
async def test_sigkill_during_a_sweep_leaves_nothing_half_erased(
    tmp_path: Path, erased: int
) -> None:
    memory = tmp_path / "memory"
    await fill(memory)
    db = memory / "agents" / AGENT / "agent.sqlite"
    command = [
        sys.executable, "-m", "session_server", "serve", "--port", "0",
        "--memory-dir", str(memory), "--retention-interval", "0.05",
    ]  # fmt: skip
    stderr = (tmp_path / "server.err").open("wb")
    proc = subprocess.Popen(  # noqa: ASYNC220 (the test only starts and kills it)
        command, stdout=subprocess.DEVNULL, stderr=stderr, cwd=ROOT, env=os.environ.copy()
    )
    try:
        await until(
            lambda: (
                count(db, "SELECT COUNT(*) FROM sessions") <= SESSIONS - erased
                or proc.poll() is not None
            ),
            f"the server's sweep erasing {erased} sessions",
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stderr.close()
    assert proc.returncode == -signal.SIGKILL, (tmp_path / "server.err").read_text()[-2000:]
    kept = check_whole_or_gone(db, memory)
    assert 0 < len(kept) < SESSIONS  # killed mid-sweep
    async with ActorRegistry(memory, idle_timeout=None) as reg:
        actor = await reg.get(AGENT)
        assert {s["id"] for s in await actor.list_sessions()} == kept
        await actor.mirror_settled()  # activation repaired the mirror
        folders = {p.name for p in (memory / "agents" / AGENT / "sessions").iterdir()}
        assert folders <= kept
        trash = memory / "agents" / AGENT / ".trash"  # folders moved, not yet deleted
        assert not trash.exists() or not any(trash.iterdir())
        done = await actor.sweep_retention()
        assert done["sessions"] == len(kept) and not done["more"]
        assert (await actor.memory_usage())["totals"]["turns"] == 0
    assert check_whole_or_gone(db, memory) == set()
