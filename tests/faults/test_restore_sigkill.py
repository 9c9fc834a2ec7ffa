"""A server SIGKILLed in the middle of ``agent.restore`` or ``import.session``.

The server is a real subprocess; a watcher thread polls the memory dir's staging folder
(``storage.staging``) and sends SIGKILL at the moment it names (the staging folder made,
the staged copy written in full). After a restart on the same memory dir nothing staged
is left, and the agent is whole: exactly its old state or exactly the new one.
"""

from __future__ import annotations

import base64
import hashlib
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from session_server.client import SessionClient
from session_server.storage.staging import STAGING_DIR
from tests.support.server import ServerProcess, turn_messages

AGENT = "agent-k"
SID = "s1"
FILLER = 40_000


def _dicts(n: int) -> list[dict[str, Any]]:
    return [msgspec.to_builtins(m) for m in turn_messages(n)]


def _staged(memory_dir: Path) -> list[Path]:
    try:
        return [p for p in (memory_dir / STAGING_DIR).iterdir() if p.is_dir()]
    except FileNotFoundError:
        return []


def _kill_when(
    server: ServerProcess, seen: Callable[[], bool], deadline: float = 60.0
) -> threading.Thread:
    """A thread that SIGKILLs the server as soon as ``seen()`` is true (polling)."""
    result: dict[str, bool] = {}

    def watch() -> None:
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            if seen():
                os.kill(server.pid, signal.SIGKILL)
                result["killed"] = True
                return

    thread = threading.Thread(target=watch, daemon=True)
    thread.result = result  # type: ignore[attr-defined]
    thread.start()
    return thread


def _with_filler(data: str, tmp: Path) -> tuple[str, str, int]:
    """The backup ``data`` plus a session of ``FILLER`` events (a file of some MB, so the
    restore takes a while): ``(base64, sha256, size)``."""
    path = tmp / "big.sqlite"
    path.write_bytes(base64.b64decode(data))
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    conn.execute(
        "INSERT INTO sessions (id, agent_id, created_at, updated_at, last_seq)"
        " VALUES ('filler', ?, 1, 1, ?)",
        (AGENT, FILLER),
    )
    conn.executemany(
        "INSERT INTO events (id, session_id, seq, action, content, created_at)"
        " VALUES (?, 'filler', ?, 'user_message', ?, 1)",
        ((f"f{i}", i, os.urandom(60).hex()) for i in range(1, FILLER + 1)),
    )
    conn.execute("COMMIT")
    conn.close()
    raw = path.read_bytes()
    return base64.b64encode(raw).decode("ascii"), hashlib.sha256(raw).hexdigest(), len(raw)


async def _events(url: str, session_id: str) -> list[dict[str, Any]] | None:
    async with SessionClient(url, AGENT) as client:
        sessions = [s["id"] for s in (await client.call("session.list", {}))["sessions"]]
        if session_id not in sessions:
            return None
        loaded = await client.call("events.load", {"session_id": session_id, "limit": 100_000})
        return list(loaded["events"])


@pytest.mark.parametrize("moment", ["staging folder made", "staged copy written"])
async def test_sigkill_during_a_restore(tmp_path: Path, moment: str) -> None:
    mem = tmp_path / "mem"
    server = ServerProcess(mem)
    server.start()
    try:
        async with SessionClient(server.url, AGENT) as client:
            await client.create_session(None, SID)
            for n in range(3):
                await client.call("turn.persist", {"session_id": SID, "messages": _dicts(n)})
            backup = await client.backup_agent()
            restored_s1 = (await client.call("events.load", {"session_id": SID}))["events"]
            await client.call("turn.persist", {"session_id": SID, "messages": _dicts(9)})
            old_s1 = (await client.call("events.load", {"session_id": SID}))["events"]
        data, digest, size = _with_filler(backup["data"], tmp_path)

        def seen() -> bool:
            staged = _staged(mem)
            if moment == "staging folder made":
                return bool(staged)
            copy = [p / "agent.sqlite" for p in staged]
            return any(c.exists() and c.stat().st_size >= size for c in copy)

        watcher = _kill_when(server, seen)
        async with SessionClient(server.url, AGENT, max_size=None) as client:
            with pytest.raises(Exception):  # noqa: B017 - the connection drops, whatever its type
                await client.restore_agent(data, digest, force=True)
        watcher.join()
        assert watcher.result.get("killed"), "the restore ended before the moment was seen"  # type: ignore[attr-defined]
        server.wait()
        assert _staged(mem), "the kill left nothing staged: the moment was missed"
    finally:
        server.kill()
    with ServerProcess(mem) as again:
        assert _staged(mem) == []  # swept at start-up
        s1 = await _events(again.url, SID)
        filler = await _events(again.url, "filler")
        if filler is None:
            assert s1 == old_s1  # the old agent, whole
        else:
            assert s1 == restored_s1 and len(filler) == FILLER  # the new one, whole
        async with SessionClient(again.url, AGENT) as client:  # and it works
            done = await client.call("turn.persist", {"session_id": SID, "messages": _dicts(20)})
            assert done["seqs"]


async def test_sigkill_during_an_import(tmp_path: Path) -> None:
    mem = tmp_path / "mem"
    lines = [
        msgspec.json.encode(
            {
                "id": f"t{i}",
                "ts": 1_700_000_000 + i,
                "turn_id": f"turn_{i // 2 + 1:04d}",
                "seq": i % 2 + 1,
                "trace_type": "user" if i % 2 == 0 else "assistant",
                "content": os.urandom(100).hex(),
                "source_event": {},
            }
        ).decode()
        for i in range(20_000)
    ]
    files = {"raw_traces.jsonl": "\n".join(lines) + "\n"}
    server = ServerProcess(mem)
    server.start()
    try:
        async with SessionClient(server.url, AGENT) as client:
            await client.create_session(None, SID)
        watcher = _kill_when(server, lambda: bool(_staged(mem)))
        async with SessionClient(server.url, AGENT, max_size=None) as client:
            with pytest.raises(Exception):  # noqa: B017 - the connection drops, whatever its type
                await client.call("import.session", {"files": files, "session_id": "imported"})
        watcher.join()
        assert watcher.result.get("killed")  # type: ignore[attr-defined]
        server.wait()
        assert _staged(mem)
    finally:
        server.kill()
    with ServerProcess(mem) as again:
        assert _staged(mem) == []
        imported = await _events(again.url, "imported")
        assert imported is None or len(imported) == len(lines)  # all of it, or nothing
        assert await _events(again.url, SID) == []
