"""``storage.backup.restore_agent`` (the CLI's offline restore): a file this server could
not have written is refused before the agent's own file is touched."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from session_server import ActorRegistry
from session_server.runtime.backups import backup_agents, restore_agents
from session_server.storage.staging import STAGING_DIR
from session_server.values.errors import InvalidParamsError
from session_server.values.events import SessionEvent
from tests.support.server import ROOT

AGENT = "agent-b"


async def _agent(memory_dir: Path) -> None:
    async with ActorRegistry(memory_dir) as reg:
        actor = await reg.get(AGENT)
        await actor.create_session(None, "s")
        await actor.append_events("s", [SessionEvent(action="user_message", content="hi")])


def _tamper(backup: Path, statement: str) -> None:
    """Change the backup file and record its new size and digest in the manifest (a
    hostile backup is self-consistent)."""
    manifest = json.loads((backup / "manifest.json").read_text())
    entry = manifest["agents"][AGENT]
    path = backup / entry["file"]
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(statement)
    conn.close()
    entry["bytes"] = path.stat().st_size
    entry["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    (backup / "manifest.json").write_text(json.dumps(manifest))


async def _contents(memory_dir: Path) -> list[str]:
    async with ActorRegistry(memory_dir) as reg:
        return [e.content for e in await (await reg.get(AGENT)).load_events("s")]


def test_a_tampered_backup_is_refused_offline_and_by_the_cli(tmp_path: Path) -> None:
    mem, bk = tmp_path / "mem", tmp_path / "bk"
    asyncio.run(_agent(mem))
    backup_agents(mem, [AGENT], bk, progress=False)
    _tamper(bk, "CREATE TRIGGER t AFTER INSERT ON events BEGIN DELETE FROM events; END")
    db = mem / "agents" / AGENT / "agent.sqlite"
    before = db.read_bytes()
    with pytest.raises(InvalidParamsError, match="trigger 't'"):
        restore_agents(bk, mem, force=True, progress=False)
    assert db.read_bytes() == before
    assert not (mem / STAGING_DIR).exists()
    done = subprocess.run(
        [sys.executable, "-m", "session_server", "restore", str(bk), "--force",
         "--memory-dir", str(mem)],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=str(ROOT),
    )  # fmt: skip
    assert done.returncode == 1 and "trigger 't'" in done.stderr, done.stderr
    assert db.read_bytes() == before
    assert asyncio.run(_contents(mem)) == ["hi"]


async def test_an_untampered_backup_is_restored_offline(tmp_path: Path) -> None:
    mem, bk = tmp_path / "mem", tmp_path / "bk"
    await _agent(mem)
    backup_agents(mem, [AGENT], bk, progress=False)
    there = tmp_path / "there"
    restored = restore_agents(bk, there, progress=False)
    assert [r["agent_id"] for r in restored] == [AGENT]
    async with ActorRegistry(there) as reg:
        events = await (await reg.get(AGENT)).load_events("s")
        assert [e.content for e in events] == ["hi"]
