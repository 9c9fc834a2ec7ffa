"""Activation and snapshot files (``MirrorLink.activate_agent``), in process, on real SQLite files
and mirror folders in a tmp dir: a snapshot file SQLite does not vouch for is removed
before anything reads the session's files; one it vouches for stays.

The state a SIGKILL leaves between a delete's commit and its repair is made by hand here
(the delete's transaction run beside the server: the rows gone, the mirror marked stale
and the snapshot unbound, the files untouched); ``tests/faults/test_deleted_stays_deleted.py``
makes it with real kills.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

from session_server.mirror.snapshot import SNAPSHOT_FILE
from session_server.mirror_io.view_files import read_memory_view
from session_server.runtime.registry import ActorRegistry
from session_server.storage.sqlite_ops import invalidate_mirror
from session_server.values.events import ContextMessage

AGENT = "agent"
SID = "s"


def db(tmp_path: Path) -> Path:
    return tmp_path / "agents" / AGENT / "agent.sqlite"


def snapshot_path(tmp_path: Path) -> Path:
    return tmp_path / "agents" / AGENT / "sessions" / SID / SNAPSHOT_FILE


async def two_turns_closed(tmp_path: Path) -> None:
    """Two turns, then a clean close: the snapshot (holding ``a1``) is bound in SQLite."""
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get(AGENT)
        await actor.create_session(session_id=SID)
        for n in range(2):
            ctx = await actor.build_working_context(SID)
            ctx.add_messages(
                [
                    ContextMessage(role="user", content=f"q{n}"),
                    ContextMessage(role="assistant", content=f"a{n}"),
                ]
            )
            await actor.persist_working_context(SID, ctx)
    assert '"a1"' in snapshot_path(tmp_path).read_text()


def bound_digest(tmp_path: Path) -> str | None:
    with sqlite3.connect(db(tmp_path)) as conn:
        row = conn.execute("SELECT snapshot_digest FROM sessions WHERE id = ?", (SID,)).fetchone()
    return None if row[0] is None else str(row[0])


async def view_after_activation(tmp_path: Path) -> str:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get(AGENT)
        await actor.mirror_settled()  # as memory.view: activation, then every write done
        return json.dumps(read_memory_view(tmp_path, AGENT, session_id=SID))


async def test_a_delete_killed_before_its_repair_leaves_no_snapshot_to_view(
    tmp_path: Path,
) -> None:
    await two_turns_closed(tmp_path)
    with sqlite3.connect(db(tmp_path)) as conn:  # the delete's transaction, nothing after
        conn.execute("DELETE FROM events WHERE session_id = ? AND content = 'a1'", (SID,))
        invalidate_mirror(conn, SID)
    view = await view_after_activation(tmp_path)
    assert '"a1"' not in view
    assert '"a0"' in view  # the rest is still mirrored
    assert not snapshot_path(tmp_path).exists()


async def test_a_repair_keeps_the_snapshot_sqlite_vouches_for(tmp_path: Path) -> None:
    await two_turns_closed(tmp_path)
    data = snapshot_path(tmp_path).read_bytes()
    assert bound_digest(tmp_path) == hashlib.sha256(data).hexdigest()
    traces = snapshot_path(tmp_path).with_name("raw_traces.jsonl")
    traces.write_bytes(traces.read_bytes()[:10])  # truncated: activation repairs
    view = await view_after_activation(tmp_path)
    assert snapshot_path(tmp_path).read_bytes() == data
    assert json.loads(view)["working_context"]
    assert traces.read_bytes().count(b"\n") == 4


async def test_a_resumed_session_keeps_no_snapshot_sqlite_vouches_for_none_of(
    tmp_path: Path,
) -> None:
    await two_turns_closed(tmp_path)
    with sqlite3.connect(db(tmp_path)) as conn:  # the checkpoint stays: a resume
        conn.execute("UPDATE sessions SET snapshot_seq = 0, snapshot_digest = NULL")
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get(AGENT)
        await actor.mirror.ensure_active(await actor.store(), SID)
        await actor.mirror.drain()
        assert not snapshot_path(tmp_path).exists()
