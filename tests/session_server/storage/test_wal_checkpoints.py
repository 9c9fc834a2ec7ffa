"""WAL checkpoints run beside the writes, not inside one (``storage/wal_checkpoints.py``).

Real agent files through ``AgentStore`` on a real thread pool: the writer's own automatic
checkpoint is only the backstop, a passive checkpoint runs every
``CHECKPOINT_EVERY_WRITES`` appends on a connection of its own, the WAL restarts once one
has caught up, a long WAL makes the next write catch up and start it over, a checkpoint
that overlaps too many appends makes the next write wait for it, the WAL stays bounded
when writes come back to back, and close waits for a running checkpoint.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import msgspec
import pytest

from session_server.core.codec import message_to_event, new_event_ids
from session_server.core.events import ContextMessage
from session_server.core.plans import AppendBatch
from session_server.storage.store import AgentStore
from session_server.storage.wal_checkpoints import (
    BACKSTOP_PAGES,
    CHECKPOINT_EVERY_WRITES,
    MAX_OVERLAP_APPENDS,
    RESTART_AT_PAGES,
    BackgroundCheckpoints,
    catch_up_then,
)

SID = "s"
PAGE = 4096


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[AgentStore]:
    with ThreadPoolExecutor(max_workers=2) as pool:
        opened = await AgentStore.open(
            tmp_path / "agent.sqlite", "a", synchronous="NORMAL", executor=pool
        )
        try:
            await opened.create_session(None, SID)
            yield opened
        finally:
            await opened.close()


def turn(n: int) -> AppendBatch:
    events = [
        message_to_event(SID, ContextMessage(role="user", content=f"question {n} " * 40)),
        message_to_event(SID, ContextMessage(role="assistant", content=f"answer {n} " * 40)),
    ]
    ids = new_event_ids(len(events))
    events = [msgspec.structs.replace(e, id=i) for e, i in zip(events, ids, strict=True)]
    return AppendBatch(session_id=SID, events=events, token_counts=None)


def wal_frames(path: Path) -> tuple[int, int]:
    """``(frames in the WAL, frames copied)`` as a passive checkpoint of a fresh
    connection reports them (it copies what is left, which is what we measure)."""
    conn = sqlite3.connect(path)
    try:
        _busy, log, done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return int(log), int(done)
    finally:
        conn.close()


async def test_the_writer_keeps_sqlites_checkpoint_only_as_a_backstop(store: AgentStore) -> None:
    assert store.writer.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == BACKSTOP_PAGES


async def test_a_checkpoint_runs_every_n_writes_and_copies_everything_while_idle(
    store: AgentStore,
) -> None:
    assert store.checkpoints is not None
    for n in range(CHECKPOINT_EVERY_WRITES - 2):  # the session's creation was one write
        await store.append(turn(n))
    await store.checkpoints.settle()
    assert store.checkpoints.runs == 0
    await store.append(turn(99))
    await store.checkpoints.settle()
    assert store.checkpoints.runs == 1
    log, done = wal_frames(store.path)
    assert log > 0 and done == log  # nothing was left for anyone else to copy


async def test_the_wal_restarts_after_a_checkpoint_caught_up(store: AgentStore) -> None:
    assert store.checkpoints is not None
    for n in range(3 * CHECKPOINT_EVERY_WRITES):
        await store.append(turn(n))
        if (n + 2) % CHECKPOINT_EVERY_WRITES == 0:
            await store.checkpoints.settle()  # an idle gap: the checkpoint catches up
    # Each round of writes began on a fully copied WAL and wrote from its start again: it
    # holds one round's frames, not three.
    log, _done = wal_frames(store.path)
    one_round = CHECKPOINT_EVERY_WRITES * 8  # a two-event turn dirties far fewer pages
    assert 0 < log <= one_round
    wal = store.path.with_name(store.path.name + "-wal")
    assert wal.stat().st_size <= 32 + (one_round + 8) * (24 + PAGE)


async def wal_after_a_pinned_checkpoint(store: AgentStore, restart_at: int) -> int:
    """Frames in the WAL after: 2 writes, a reader's snapshot taken, 2 more writes (the
    background checkpoint they start can copy only up to that snapshot, as it would when
    writes come faster than it), the reader gone, one more write."""
    checkpoints = BackgroundCheckpoints(
        store.path, "NORMAL", store._call, every=4, restart_at=restart_at
    )
    store.checkpoints = checkpoints
    reader = sqlite3.connect(store.path, isolation_level=None)
    try:
        for n in range(2):
            await store.append(turn(n))
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM events").fetchone()  # the snapshot is pinned
        for n in range(2, 4):  # the 4th append starts one
            await store.append(turn(n))
        await checkpoints.settle()
        assert checkpoints.runs == 1
        reader.execute("COMMIT")
    finally:
        reader.close()
    await store.append(turn(4))
    log, _done = wal_frames(store.path)
    assert len(await store.load_events(SID, limit=None)) == 10
    return log


async def test_a_long_wal_makes_the_next_write_catch_up_and_start_it_over(
    store: AgentStore,
) -> None:
    log = await wal_after_a_pinned_checkpoint(store, restart_at=10)
    assert store.checkpoints is not None and store.checkpoints.catch_ups == 1
    # The write copied what was left, found every frame copied and wrote from the WAL's
    # start: the WAL holds its frames only.
    assert 0 < log <= 12


async def test_without_a_catch_up_the_wal_goes_on_growing(store: AgentStore) -> None:
    # The control of the test above: the same writes, no catch-up (threshold never met).
    log = await wal_after_a_pinned_checkpoint(store, restart_at=10**9)
    assert store.checkpoints is not None and store.checkpoints.catch_ups == 0
    assert log > 12


async def test_back_to_back_writes_keep_the_wal_bounded(store: AgentStore) -> None:
    wal = store.path.with_name(store.path.name + "-wal")
    per_write = 12  # pages a two-event turn dirties, at most (page splits included)
    # The bound of the module doc: a catch-up is decided when a checkpoint ends, at most
    # MAX_OVERLAP_APPENDS after it began (then writes wait for it); the one before may
    # have ended just under the threshold, as long, and the next starts 16 appends later.
    appends = 2 * MAX_OVERLAP_APPENDS + CHECKPOINT_EVERY_WRITES + 4
    bound = 32 + (RESTART_AT_PAGES + per_write * appends) * (24 + PAGE)
    for n in range(1500):
        await store.append(turn(n))
        assert wal.stat().st_size <= bound
    events = await store.load_events(SID, limit=None)
    assert len(events) == 2 * 1500


class Gate:
    """A ``run_on_thread`` for ``BackgroundCheckpoints`` whose checkpoints wait for
    ``open()`` on their worker thread (the store's pool runs everything else)."""

    def __init__(self, store: AgentStore) -> None:
        self.store = store
        self.event = threading.Event()
        self.started = threading.Event()

    async def __call__(self, fn: Callable[[], Any]) -> Any:
        def gated() -> Any:
            self.started.set()
            self.event.wait(30)
            return fn()

        return await self.store._call(gated)

    def open(self) -> None:
        self.event.set()


async def test_a_checkpoint_overlapping_too_many_appends_makes_the_next_write_wait(
    store: AgentStore,
) -> None:
    gate = Gate(store)
    checkpoints = BackgroundCheckpoints(store.path, "NORMAL", gate, every=4)
    store.checkpoints = checkpoints
    submitted: list[str] = []
    call = store._call

    async def recording_call(fn: Callable[..., Any], *args: Any) -> Any:
        submitted.append(getattr(fn, "__name__", "?"))
        return await call(fn, *args)

    store._call = recording_call  # type: ignore[method-assign]
    try:
        for n in range(4 + MAX_OVERLAP_APPENDS):  # the 4th starts one; it stays blocked
            await store.append(turn(n))
        assert checkpoints.running and checkpoints.attention
        submitted.clear()
        write = asyncio.create_task(store.append(turn(999)))
        for _ in range(20):
            await asyncio.sleep(0)  # let the write run up to where it waits
        assert submitted == [] and not write.done()  # it waits for the checkpoint
        gate.open()
        await write
        assert submitted == ["catch_up_then"] and checkpoints.catch_ups == 1
        log, _done = wal_frames(store.path)
        assert 0 < log <= 12  # that write started the WAL over
    finally:
        gate.open()
        store._call = call  # type: ignore[method-assign]


async def test_close_waits_for_a_running_checkpoint(store: AgentStore) -> None:
    gate = Gate(store)
    checkpoints = BackgroundCheckpoints(store.path, "NORMAL", gate, every=4)
    store.checkpoints = checkpoints
    try:
        for n in range(4):
            await store.append(turn(n))
        assert checkpoints.running
        await asyncio.to_thread(gate.started.wait, 30)
        closing = asyncio.create_task(checkpoints.close())
        for _ in range(20):
            await asyncio.sleep(0)
        assert not closing.done()
        gate.open()
        await closing
        # It ended before close did (a checkpoint not begun when close starts is skipped).
        assert not checkpoints.running and checkpoints.runs == 0
    finally:
        gate.open()


async def test_a_cancelled_checkpoint_lets_close_and_settle_end_quietly(
    store: AgentStore,
) -> None:
    gate = Gate(store)
    checkpoints = BackgroundCheckpoints(store.path, "NORMAL", gate, every=4)
    store.checkpoints = checkpoints
    try:
        for n in range(4):
            await store.append(turn(n))
        task = checkpoints._task
        assert task is not None
        task.cancel()  # as a loop shutting down cancels its tasks
        await checkpoints.settle()
        await checkpoints.close()
        assert task.cancelled()
    finally:
        gate.open()


async def test_a_failed_catch_up_checkpoint_still_runs_the_write(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    conn = sqlite3.connect(tmp_path / "x.sqlite")
    conn.close()  # any use of it fails
    with caplog.at_level(logging.WARNING):
        assert catch_up_then(conn, lambda a, b: a + b, 2, 3) == 5
    assert any("catch-up checkpoint failed" in r.getMessage() for r in caplog.records)


async def test_the_wal_is_gone_after_close(tmp_path: Path) -> None:
    path = tmp_path / "agent.sqlite"
    with ThreadPoolExecutor(max_workers=2) as pool:
        store = await AgentStore.open(path, "a", synchronous="FULL", executor=pool)
        await store.create_session(None, SID)
        for n in range(CHECKPOINT_EVERY_WRITES):
            await store.append(turn(n))
        await store.close()
    assert not path.with_name(path.name + "-wal").exists()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 2 * (
            CHECKPOINT_EVERY_WRITES
        )
    finally:
        conn.close()


async def test_a_failed_checkpoint_is_logged_and_changes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    not_a_db = tmp_path / "x.sqlite"
    not_a_db.write_bytes(b"this is not a database file" * 100)
    with ThreadPoolExecutor(max_workers=1) as pool:
        loop = asyncio.get_running_loop()

        async def on_thread(fn: Callable[[], Any]) -> Any:
            return await loop.run_in_executor(pool, fn)

        checkpoints = BackgroundCheckpoints(not_a_db, "NORMAL", on_thread, every=2)
        with caplog.at_level(logging.WARNING):
            checkpoints.committed()
            checkpoints.committed()
            await checkpoints.settle()
            checkpoints.committed(2)  # counting goes on after a failure
            await checkpoints.settle()
        await checkpoints.close()
    assert checkpoints.runs == 0
    failures = [r for r in caplog.records if "background checkpoint" in r.getMessage()]
    assert len(failures) == 2
    assert "not a database" in failures[0].getMessage()
