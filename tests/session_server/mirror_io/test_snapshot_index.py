"""``memory.list_snapshots`` reads the snapshot index, not the folders.

Real registries and a real server over tmp folders: the index file is created, kept up
to date by the mirror writer (new sessions, new files, deleted sessions), saved on a
clean stop and read back without a scan, rebuilt when missing, unclean, marked stale by
another writer or holding a bad row, and never lists a deleted session.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from session_server import ActorRegistry
from session_server.client import SessionClient
from session_server.mirror_io.snapshot_index import INDEX_FILE, SnapshotIndex
from session_server.mirror_io.view_files import list_snapshot_summaries
from session_server.values.events import ContextMessage
from tests.support.server import running_server


async def turn(reg: ActorRegistry, agent: str, session_id: str) -> None:
    actor = await reg.get(agent)
    sid = await actor.create_session(session_id=session_id)
    ctx = await actor.build_working_context(sid)
    ctx.add_messages([ContextMessage(role="user", content="q")])
    await actor.persist_working_context(sid, ctx)
    await actor.mirror.drain()


def listed(index: SnapshotIndex) -> set[tuple[str, str | None]]:
    return {(s.agent_id, s.session_id) for s in index.summaries()}


async def test_created_then_read_back_without_a_scan(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        await turn(reg, "a", "s1")
        await turn(reg, "b", "s2")
        index = reg.snapshot_index
        assert index is not None
        assert listed(index) == {("a", "s1"), ("b", "s2")}
        assert index.rebuilds == 1  # a new file: one scan
    assert (tmp_path / INDEX_FILE).is_file()
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        index = reg.snapshot_index
        assert index is not None
        # Read back from the file (no scan); equal to what a scan finds.
        assert listed(index) == {("a", "s1"), ("b", "s2")}
        assert index.rebuilds == 0
        scanned = {(s.agent_id, s.session_id): s for s in list_snapshot_summaries(tmp_path)}
        for summary in index.summaries():
            assert scanned[(summary.agent_id, summary.session_id)] == summary


async def test_updated_by_writes_and_deletes(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        await turn(reg, "a", "s1")
        index = reg.snapshot_index
        assert index is not None
        first = {s.session_id: s for s in index.summaries()}["s1"]
        assert first.has_raw_traces and first.has_working_context
        await turn(reg, "a", "s2")
        assert listed(index) == {("a", "s1"), ("a", "s2")}
        actor = await reg.get("a")
        assert await actor.delete_session("s1")
        # Gone at once (before the folder is removed), and after the removal too.
        assert listed(index) == {("a", "s2")}
        await actor.mirror.drain()
        assert not (tmp_path / "agents" / "a" / "sessions" / "s1").exists()
        assert listed(index) == {("a", "s2")}
        # The same id again is a new session: listed again.
        await turn(reg, "a", "s1")
        assert listed(index) == {("a", "s1"), ("a", "s2")}
        assert index.rebuilds == 1


async def test_written_before_any_listing_then_saved(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        await turn(reg, "a", "s1")
        assert reg.snapshot_index is not None
        reg.snapshot_index.summaries()
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        await turn(reg, "a", "s2")  # touched, never listed in this process
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        assert reg.snapshot_index is not None
        assert listed(reg.snapshot_index) == {("a", "s1"), ("a", "s2")}
        assert reg.snapshot_index.rebuilds == 0


async def test_rebuilt_when_missing_or_bad(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        await turn(reg, "a", "s1")
    (tmp_path / INDEX_FILE).unlink()
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        assert reg.snapshot_index is not None
        assert listed(reg.snapshot_index) == {("a", "s1")}
        assert reg.snapshot_index.rebuilds == 1
    # A row no server writes (an agent id that is no folder name): not trusted.
    with sqlite3.connect(tmp_path / INDEX_FILE) as conn:
        conn.execute("INSERT INTO folders VALUES ('../etc', 's', 1.0, 1)")
    conn.close()
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        assert reg.snapshot_index is not None
        assert listed(reg.snapshot_index) == {("a", "s1")}
        assert reg.snapshot_index.rebuilds == 1


async def test_an_unclean_stop_means_a_rebuild(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        await turn(reg, "a", "s1")
        assert reg.snapshot_index is not None
        reg.snapshot_index.summaries()  # loaded, so the clean stop saves it
    index = SnapshotIndex(tmp_path)
    assert listed(index) == {("a", "s1")}
    assert index.rebuilds == 0
    # No close (as after a SIGKILL): the file stays marked unclean.
    (tmp_path / "agents" / "a" / "sessions" / "s9").mkdir()
    (tmp_path / "agents" / "a" / "sessions" / "s9" / "raw_traces.jsonl").write_text("{}\n")
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        assert reg.snapshot_index is not None
        assert listed(reg.snapshot_index) == {("a", "s1"), ("a", "s9")}
        assert reg.snapshot_index.rebuilds == 1


async def test_another_writer_marks_the_index_stale(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        await turn(reg, "a", "s1")
        assert reg.snapshot_index is not None
        reg.snapshot_index.summaries()
        # A tool writing beside the owner (an offline CLI import): not the owner.
        async with ActorRegistry(tmp_path, idle_timeout=None, index_owner=False) as tool:
            await turn(tool, "b", "s2")
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        assert reg.snapshot_index is not None
        assert listed(reg.snapshot_index) == {("a", "s1"), ("b", "s2")}
        assert reg.snapshot_index.rebuilds == 1


async def test_memory_list_snapshots_over_the_wire(tmp_path: Path) -> None:
    async with running_server(tmp_path / "memory") as server:
        async with SessionClient(server.url, "agent") as client:
            for sid in ("s1", "s2"):
                await client.create_session(session_id=sid)
                await client.persist_turn(sid, [ContextMessage(role="user", content="q")])
            await client.call("session.delete", {"session_id": "s1"})
        async with SessionClient(server.url, None) as admin:
            page = await admin.call("memory.list_snapshots", {})
        assert [(e["agent_id"], e["session_id"]) for e in page["entries"]] == [("agent", "s2")]
        assert page["total"] == 1


def test_a_write_landing_during_a_delete_keeps_the_tombstone(tmp_path: Path) -> None:
    """A mirror write scheduled before a session delete may land in the folder after the
    delete tombstoned it (the chain runs beside ``forget``): the tombstone must hold, so
    an index rebuilt after a SIGKILL between the commit and the folder's removal never
    lists the deleted session. A folder written after the removal is a new session."""
    folder = tmp_path / "agents" / "a" / "sessions" / "s"
    folder.mkdir(parents=True)
    (folder / "raw_traces.jsonl").write_text('{"id": "t1"}\n')
    index = SnapshotIndex(tmp_path)
    index.touch("a", "s")
    assert ("a", "s") in listed(index)
    index.forget("a", "s")  # the delete begins
    index.touch("a", "s")  # the write in flight lands in the folder
    assert ("a", "s") not in listed(index)
    # SIGKILL now (the delete committed, the folder not removed yet): the file is left
    # unclean, the next server rebuilds the index from the folders.
    after = SnapshotIndex(tmp_path)
    assert ("a", "s") not in listed(after)
    after.close()
    # The removal, then a new session under the same id: listed again.
    (folder / "raw_traces.jsonl").unlink()
    folder.rmdir()
    index.touch("a", "s")
    assert ("a", "s") not in listed(index)
    folder.mkdir()
    (folder / "raw_traces.jsonl").write_text('{"id": "t2"}\n')
    index.touch("a", "s")
    assert ("a", "s") in listed(index)
    index.close()
    assert ("a", "s") in listed(SnapshotIndex(tmp_path))
