"""Deleted stays deleted, in process: what a delete writes in its own transaction, the
checkpoint a clean close stores, the resume it allows, and the schema migration that
brings older files to it (real SQLite files and mirror folders in a tmp dir)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Collection
from pathlib import Path

import pytest

from session_server.runtime.registry import ActorRegistry
from session_server.storage.schema import SCHEMA_VERSION
from session_server.values.errors import AgentUnavailableError
from session_server.values.events import ContextMessage, SessionEvent
from tests.support.mirror_check import expected_mirror, mirror_files
from tests.support.old_schema import undo_to

AGENT = "agent"
# The sessions table of schema version 1, with the rows of the current one.
V1_SESSIONS = """
CREATE TABLE sessions_v1 (
  id TEXT PRIMARY KEY NOT NULL,
  agent_id TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  metadata TEXT,
  last_seq INTEGER NOT NULL DEFAULT 0,
  last_turn INTEGER NOT NULL DEFAULT 0,
  last_turn_start_seq INTEGER NOT NULL DEFAULT 0,
  strategy TEXT,
  compaction_required INTEGER NOT NULL DEFAULT 0,
  mirror_seq INTEGER NOT NULL DEFAULT 0
);
INSERT INTO sessions_v1 SELECT id, agent_id, created_at, updated_at, metadata, last_seq,
  last_turn, last_turn_start_seq, strategy, compaction_required, mirror_seq FROM sessions;
DROP TABLE sessions;
ALTER TABLE sessions_v1 RENAME TO sessions;
"""


def db(tmp_path: Path) -> Path:
    return tmp_path / "agents" / AGENT / "agent.sqlite"


def columns(tmp_path: Path, sid: str) -> dict[str, object]:
    with sqlite3.connect(db(tmp_path)) as conn:
        conn.row_factory = sqlite3.Row
        row = conn.execute(
            "SELECT last_seq, mirror_seq, mirror_state, mirror_files, snapshot_seq,"
            " snapshot_digest FROM sessions WHERE id = ?",
            (sid,),
        ).fetchone()
    return dict(row)


async def two_turns(reg: ActorRegistry) -> str:
    actor = await reg.get(AGENT)
    sid = await actor.create_session(session_id="s")
    for n in range(2):
        ctx = await actor.build_working_context(sid)
        ctx.add_messages(
            [
                ContextMessage(role="user", content=f"q{n}"),
                ContextMessage(role="assistant", content=f"a{n}"),
            ]
        )
        await actor.persist_working_context(sid, ctx)
    return sid


async def test_a_clean_close_binds_the_snapshot_and_stores_the_checkpoint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        sid = await two_turns(reg)
    cols = columns(tmp_path, sid)
    snapshot = tmp_path / "agents" / AGENT / "sessions" / sid / "working_context_snapshot.json"
    assert cols["mirror_seq"] == cols["last_seq"] == cols["snapshot_seq"] == 4
    assert cols["snapshot_digest"] == hashlib.sha256(snapshot.read_bytes()).hexdigest()
    assert cols["mirror_state"] and cols["mirror_files"]
    caplog.set_level(logging.INFO, logger="session_server")
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get(AGENT)
        await actor.append_events(sid, [SessionEvent(content="q2")])
        events = await actor.load_events(sid, limit=None, tail=False)
    assert "repair" not in caplog.text  # resumed from the checkpoint: no history read
    assert mirror_files(tmp_path, AGENT, sid) == expected_mirror(events)


async def test_an_edit_that_keeps_the_size_and_sets_the_mtime_back_is_repaired(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``touch -r`` after an edit in place: size and mtime as recorded, yet the file is
    not what SQLite holds. Its ctime moved, so activation repairs it."""
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        sid = await two_turns(reg)
    trace = tmp_path / "agents" / AGENT / "sessions" / sid / "raw_traces.jsonl"
    before = trace.stat()
    data = trace.read_bytes()
    assert b'"q1"' in data
    trace.write_bytes(data.replace(b'"q1"', b'"XX"'))  # same size
    os.utime(trace, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = trace.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    caplog.set_level(logging.INFO, logger="session_server")
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get(AGENT)
        await actor.append_events(sid, [SessionEvent(content="q2")])
        events = await actor.load_events(sid, limit=None, tail=False)
    assert "repair" in caplog.text
    assert mirror_files(tmp_path, AGENT, sid) == expected_mirror(events)


@pytest.mark.parametrize("how", ["delete", "pop", "clear"])
async def test_a_delete_marks_the_mirror_stale_in_its_own_transaction(
    tmp_path: Path, how: str
) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        sid = await two_turns(reg)
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get(AGENT)
        events = await actor.load_events(sid, limit=None, tail=False)
        if how == "delete":
            assert await actor.delete_events(sid, [events[1].id]) == 1
        elif how == "pop":
            assert await actor.pop_event(sid) is not None
        else:
            assert await actor.clear_session(sid) == 4
        # Read beside the server, right after the answer: the transaction said it.
        cols = columns(tmp_path, sid)
        assert cols["mirror_seq"] == -1
        assert cols["snapshot_digest"] is None and cols["mirror_state"] is None
        ctx = await actor.build_working_context(sid)
        assert "restored_from" not in (ctx.metadata or {})
        await actor.mirror.drain()
        left = await actor.load_events(sid, limit=None, tail=False)
        assert mirror_files(tmp_path, AGENT, sid) == expected_mirror(left)
    assert columns(tmp_path, sid)["mirror_seq"] == 4  # repaired and confirmed at close


async def test_files_written_by_schema_1_are_migrated(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        sid = await two_turns(reg)
    with sqlite3.connect(db(tmp_path)) as conn:  # as version 1 left it
        for statement in undo_to(3):  # what versions 4 and later added
            conn.execute(statement)
        conn.executescript(V1_SESSIONS)
        conn.execute("PRAGMA user_version=1")
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get(AGENT)
        ctx = await actor.build_working_context(sid)
        assert "restored_from" not in (ctx.metadata or {})  # no binding: not trusted
        assert [m.content for m in ctx.messages] == ["q0", "a0", "q1", "a1"]
        events = await actor.load_events(sid, limit=None, tail=False)
    with sqlite3.connect(db(tmp_path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert mirror_files(tmp_path, AGENT, sid) == expected_mirror(events)


async def test_the_cli_exports_a_file_of_schema_1(tmp_path: Path) -> None:
    """The first command after an upgrade may be an offline ``export``: it reads (and so
    migrates) a file no server opened since, and a read-only store of an older schema
    says what to do instead of failing on a missing column."""
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        sid = await two_turns(reg)
    with sqlite3.connect(db(tmp_path)) as conn:
        for statement in undo_to(3):  # what versions 4 and later added
            conn.execute(statement)
        conn.executescript(V1_SESSIONS)
        conn.execute("PRAGMA user_version=1")
    async with ActorRegistry(tmp_path, idle_timeout=None, readonly=True) as reg:
        with pytest.raises(AgentUnavailableError, match="schema version 1"):
            await (await reg.get(AGENT)).list_sessions()
    out = tmp_path / "out"
    command = [sys.executable, "-m", "session_server", "export", AGENT, "--session", sid]
    command += ["--out", str(out), "--memory-dir", str(tmp_path)]
    done = await asyncio.to_thread(
        subprocess.run, command, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    traces = (out / "agents" / AGENT / "raw_traces.jsonl").read_text().splitlines()
    assert len(traces) == 4
    with sqlite3.connect(db(tmp_path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


async def test_folders_beside_a_new_agent_file_are_left_alone(tmp_path: Path) -> None:
    """Reference folders placed by hand for an agent the server never wrote are not
    orphans of its sessions: only an existing file's missing sessions make orphans."""
    placed = tmp_path / "agents" / AGENT / "sessions" / "reference"
    placed.mkdir(parents=True)
    (placed / "raw_traces.jsonl").write_text("{}\n")
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        assert await (await reg.get(AGENT)).list_sessions() == []
    assert (placed / "raw_traces.jsonl").exists()
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:  # now the file exists
        assert await (await reg.get(AGENT)).list_sessions() == []
    assert not placed.exists()


async def test_a_session_made_while_activation_sweeps_keeps_its_folder(tmp_path: Path) -> None:
    """Activation lists the sessions, then removes the folders of the others (orphans).
    A call arriving meanwhile waits for the activation: a session it creates and
    mirrors is never taken for an orphan (its files would be gone for good, since the
    checkpoint at close trusts what is on disk)."""
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        await two_turns(reg)
    entered, release = threading.Event(), threading.Event()
    async with ActorRegistry(tmp_path, idle_timeout=None, io_threads=4) as reg:
        actor = await reg.get(AGENT)
        sweep = actor.mirror.writer.sweep_orphans

        def gated(ids: Collection[str]) -> list[str]:
            entered.set()
            release.wait(30)
            return sweep(ids)

        actor.mirror.writer.sweep_orphans = gated  # type: ignore[method-assign,assignment]

        async def newcomer() -> list[SessionEvent]:
            sid = await actor.create_session(session_id="new")
            await actor.append_events(sid, [SessionEvent(content="hello")])
            await actor.mirror.drain()
            return await actor.load_events(sid, limit=None, tail=False)

        first = asyncio.ensure_future(actor.list_sessions())  # activates the agent
        assert await asyncio.to_thread(entered.wait, 30)
        second = asyncio.ensure_future(newcomer())
        # Give the newcomer every chance to run ahead of the sweep (a bound, not a sync).
        await asyncio.wait({second}, timeout=1.0)
        release.set()
        assert [s["id"] for s in await first] == ["s"]
        events = await second
        await actor.mirror.drain()
        assert mirror_files(tmp_path, AGENT, "new") == expected_mirror(events)
