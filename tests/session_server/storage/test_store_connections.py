"""``StoreConnections.close`` against a read whose caller left: the read's job still runs
on its worker thread, so the close waits for it instead of closing the connection under
it (which crashed the process inside SQLite), and a job that starts after the close opens
nothing again. A real store on a real file."""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from session_server.concurrency.worker_threads import WorkerThreads
from session_server.storage.store import AgentStore
from session_server.values.errors import AgentUnavailableError
from session_server.values.events import SessionEvent
from session_server.values.plans import AppendBatch
from tests.support.waiting import until


class CountingPool(WorkerThreads):
    """A pool of one thread that counts the jobs queued on it."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="counting-test")
        self.submitted = 0

    def _put(self, job: Any) -> None:
        self.submitted += 1
        super()._put(job)


@pytest.fixture
def pool() -> Iterator[WorkerThreads]:
    with WorkerThreads(max_workers=2, thread_name_prefix="store-test") as threads:
        yield threads


async def test_a_close_waits_for_a_read_whose_caller_was_cancelled(
    tmp_path: Path, pool: WorkerThreads
) -> None:
    store = await AgentStore.open(tmp_path / "agent.sqlite", "agent", executor=pool)
    await store.create_session(None, "s")
    inside, release = threading.Event(), threading.Event()
    answers: list[object] = []

    def slow_read(conn: sqlite3.Connection) -> None:
        inside.set()
        assert release.wait(10)
        try:
            answers.append(conn.execute("SELECT count(*) FROM sessions").fetchone()[0])
        except sqlite3.Error as exc:  # the connection closed under the read
            answers.append(exc)

    reading = asyncio.create_task(store._read(slow_read))
    assert await asyncio.to_thread(inside.wait, 10)
    reading.cancel()  # the caller leaves; the job goes on on its thread
    with pytest.raises(asyncio.CancelledError):
        await reading
    closing = asyncio.create_task(store.close())
    # The close cannot end while the read holds the connection (before the fix it did,
    # at once: the read lock was released with the cancelled caller).
    done, _ = await asyncio.wait({closing}, timeout=0.5)
    assert not done
    release.set()
    await closing
    assert answers == [1]


async def test_a_read_job_that_starts_after_the_close_opens_nothing(
    tmp_path: Path,
) -> None:
    with CountingPool() as one:
        store = await AgentStore.open(tmp_path / "agent.sqlite", "agent", executor=one)
        blocker = threading.Event()
        one.post(lambda: blocker.wait(10))  # the pool's thread is busy: the read waits in line
        submitted = one.submitted
        reading = asyncio.create_task(store._read(lambda conn: conn.execute("SELECT 1")))
        await until(lambda: one.submitted > submitted, "the read's job to be queued")
        reading.cancel()  # its job is queued behind the blocker
        closing = asyncio.create_task(store.close())
        blocker.set()
        await closing
        with pytest.raises(asyncio.CancelledError):
            await reading
        # The orphaned job ran after the close: it found the store closed, no reader left.
        with pytest.raises(AgentUnavailableError, match="store is closed"):
            await store._read(lambda conn: conn.execute("SELECT 1"))
        assert store._reader is None


async def test_a_delete_stands_when_the_store_closes_before_its_wal_erase(
    tmp_path: Path,
    pool: WorkerThreads,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The store is closed between a committed delete and its WAL erase (a local caller
    closing it beside the delete): the delete answers as done, as for an erase that
    failed (not with the close's error, as if nothing was deleted), and the warning
    names no deleted text."""
    real_erase = AgentStore.erase_wal

    async def close_first(store: AgentStore) -> None:
        await store.close()
        await real_erase(store)

    path = tmp_path / "agent.sqlite"
    for delete in ("session", "events"):
        store = await AgentStore.open(path, "agent", executor=pool)
        await store.create_session(None, delete)
        event = SessionEvent(id=f"{delete}-1", session_id=delete, content="SECRET")
        await store.append(AppendBatch(delete, [event], None))
        monkeypatch.setattr(AgentStore, "erase_wal", close_first)
        with caplog.at_level("WARNING", logger="session_server.storage.store"):
            if delete == "session":
                assert await store.delete_session(delete) is True
            else:
                assert await store.delete_events(delete, [event.id]) == 1
        monkeypatch.undo()
    store = await AgentStore.open(path, "agent", executor=pool)
    try:
        assert await store.get_session("session") is None
        assert await store.load_events("events", limit=None) == []
    finally:
        await store.close()
    warnings = [r.getMessage() for r in caplog.records if "WAL not erased" in r.getMessage()]
    assert len(warnings) == 2 and not any("SECRET" in w for w in warnings), warnings


# A process that commits a delete on the agent file (as the store does: secure_delete,
# WAL) and is killed before anything checkpoints: the deleted text is still in the main
# file's pages (and in older WAL frames) when the store opens next.
ROOT = Path(__file__).resolve().parents[3]
DELETE_THEN_DIE = """
import os, signal, sys
from pathlib import Path
from session_server.storage.sqlite_open import connect
conn = connect(Path(sys.argv[1]), synchronous="FULL", busy_timeout_ms=5000, readonly=False)
conn.execute("BEGIN IMMEDIATE")
conn.execute("DELETE FROM events WHERE content = ?", (sys.argv[2],))
conn.execute("COMMIT")
os.kill(os.getpid(), signal.SIGKILL)
"""


async def test_a_wal_left_by_a_kill_after_a_delete_is_erased_on_open(
    tmp_path: Path, pool: WorkerThreads
) -> None:
    """Issue 33, item 3: no deleted text in the raw bytes of the file or its WAL once the
    store is open again, even when the delete's own truncation never ran."""
    path = tmp_path / "agent.sqlite"
    secret = "SECRET-IN-THE-PAGES"
    store = await AgentStore.open(path, "agent", executor=pool)
    await store.create_session(None, "s")
    events = [SessionEvent(id=f"e{i}", content=secret if i == 1 else f"kept {i}") for i in range(3)]
    await store.append(AppendBatch("s", events, None))
    await store.close()  # checkpointed: the text is in the main file
    assert secret.encode() in path.read_bytes()
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", DELETE_THEN_DIE, str(path), secret],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    wal = path.with_name(path.name + "-wal")
    assert wal.stat().st_size > 0 and secret.encode() in path.read_bytes()
    store = await AgentStore.open(path, "agent", executor=pool)
    try:
        for name in (path, wal):
            data = name.read_bytes() if name.exists() else b""
            assert secret.encode() not in data, name.name
        left = await store.load_events("s", limit=None, tail=False)
        assert [e.content for e in left] == ["kept 0", "kept 2"]
    finally:
        await store.close()
