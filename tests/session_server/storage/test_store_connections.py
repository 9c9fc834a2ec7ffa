"""``StoreConnections.close`` against a read whose caller left: the read's job still runs
on its worker thread, so the close waits for it instead of closing the connection under
it (which crashed the process inside SQLite), and a job that starts after the close opens
nothing again. A real store on a real file."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from session_server.core.errors import AgentUnavailableError
from session_server.storage.store import AgentStore


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    with ThreadPoolExecutor(max_workers=2) as executor:
        yield executor


async def test_a_close_waits_for_a_read_whose_caller_was_cancelled(
    tmp_path: Path, pool: ThreadPoolExecutor
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
    with ThreadPoolExecutor(max_workers=1) as one:
        store = await AgentStore.open(tmp_path / "agent.sqlite", "agent", executor=one)
        blocker = threading.Event()
        one.submit(blocker.wait, 10)  # the pool's thread is busy: the read waits in line
        reading = asyncio.create_task(store._read(lambda conn: conn.execute("SELECT 1")))
        await asyncio.sleep(0)  # the read's job is queued behind the blocker
        reading.cancel()
        closing = asyncio.create_task(store.close())
        blocker.set()
        await closing
        with pytest.raises(asyncio.CancelledError):
            await reading
        # The orphaned job ran after the close: it found the store closed, no reader left.
        with pytest.raises(AgentUnavailableError, match="store is closed"):
            await store._read(lambda conn: conn.execute("SELECT 1"))
        assert store._reader is None
