"""The recall index and the events agree after a SIGKILL at any moment: while a migrated
file is indexed in the background, and while turns are written."""

from __future__ import annotations

import asyncio
import os
import random
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from session_server.runtime.registry import ActorRegistry
from tests.session_server.runtime.test_recall import _make_v7_file
from tests.session_server.test_crash_safety import WRITER, Writer
from tests.support.recall_index import indexed_rowids

ROOT = Path(__file__).resolve().parents[3]
CHILD = ROOT / "tests" / "support" / "recall_child.py"
DEADLINE_S = 60.0  # a guard against a hung child; never used to synchronise


def _agreement(db: Path) -> tuple[set[int], set[int]]:
    """(rowids the index holds, rowids it should hold given the backfill's progress),
    after FTS5's own integrity check."""
    conn = sqlite3.connect(db)
    try:
        counts = indexed_rowids(conn)
        assert set(counts.values()) <= {1}  # no event in two shards
        indexed = set(counts)
        # every write of the store indexed its events before it committed
        assert conn.execute("SELECT count(*) FROM recall_pending").fetchone()[0] == 0
        # and erased what it deleted, merging the shards, before it committed
        assert conn.execute("SELECT count(*) FROM events_fts_gone").fetchone()[0] == 0
        row = conn.execute(
            "SELECT json_extract(value, '$.next'), json_extract(value, '$.end')"
            " FROM agent_settings WHERE key = 'recall_backfill'"
        ).fetchone()
        start, end = (0, 0) if row is None else row
        expected = {
            r[0]
            for r in conn.execute("SELECT rowid FROM events WHERE action != 'compaction'")
            if not start < r[0] <= end
        }
        return indexed, expected
    finally:
        conn.close()


async def _finish(memory_dir: Path, agent: str) -> int:
    async with ActorRegistry(memory_dir, idle_timeout=None) as reg:
        actor = await reg.get(agent)
        await actor.store()
        await actor.recall_settled()
        found = await actor.search("lorem", limit=50)
        assert found["indexing"] is False
        return len(found["hits"])


@pytest.mark.parametrize("shard_chars", [None, 3000], ids=["default-shards", "small-shards"])
def test_sigkill_during_the_backfill_leaves_index_and_events_agreeing(
    tmp_path: Path, shard_chars: int | None
) -> None:
    seed = int(os.environ.get("CRASH_SEED", random.SystemRandom().randrange(2**32)))
    rng = random.Random(seed)
    db = _make_v7_file(tmp_path, 12_000)
    kills = 0
    shards = [] if shard_chars is None else [str(shard_chars)]
    for round_no in range(4):
        where = f"seed={seed} round={round_no}"
        deadline = time.monotonic() + DEADLINE_S
        child = Writer(
            tmp_path,
            tmp_path / "child.stderr",
            [sys.executable, str(CHILD), str(tmp_path), "agent", *shards],
        )
        try:
            for _ in range(rng.randint(1, 6)):
                line = child.readline(deadline)
                assert line is not None, f"{where}: {child.stderr_text()}"
                if line == "DONE":
                    break
            child.kill()  # SIGKILL, wherever the backfill is
            kills += 1
        finally:
            child.close()
        indexed, expected = _agreement(db)
        assert indexed == expected, where
    assert kills == 4
    assert asyncio.run(_finish(tmp_path, "agent")) == 50
    indexed, expected = _agreement(db)
    assert indexed == expected and len(indexed) == 12_000


def test_sigkill_during_writes_leaves_index_and_events_agreeing(tmp_path: Path) -> None:
    seed = int(os.environ.get("CRASH_SEED", random.SystemRandom().randrange(2**32)))
    rng = random.Random(seed)
    memory = tmp_path / "memory"
    for round_no in range(4):
        deadline = time.monotonic() + DEADLINE_S
        writer = Writer(
            memory,
            tmp_path / "writer.stderr",
            [sys.executable, str(WRITER), str(memory), "crash-agent", "s"],
        )
        try:
            acks = rng.randint(1, 15)
            for _ in range(acks + 1):  # READY, then ACK lines
                assert writer.readline(deadline) is not None, writer.stderr_text()
            writer.kill()
        finally:
            writer.close()
        indexed, expected = _agreement(memory / "agents" / "crash-agent" / "agent.sqlite")
        assert indexed == expected, f"seed={seed} round={round_no}"
        assert indexed


def test_sigkill_during_deletes_leaves_index_and_events_agreeing(tmp_path: Path) -> None:
    """Deletes and pops over small shards, each merging its shards in its own
    transaction, killed at random: index and events agree, no delete half erased."""
    seed = int(os.environ.get("CRASH_SEED", random.SystemRandom().randrange(2**32)))
    rng = random.Random(seed)
    db = _make_v7_file(tmp_path, 2_000)
    for round_no in range(4):
        where = f"seed={seed} round={round_no}"
        deadline = time.monotonic() + DEADLINE_S
        child = Writer(
            tmp_path,
            tmp_path / "child.stderr",
            [sys.executable, str(CHILD), str(tmp_path), "agent", "2000", "delete"],
        )
        try:
            deletes = rng.randint(1, 8)
            while deletes:
                line = child.readline(deadline)
                assert line is not None, f"{where}: {child.stderr_text()}"
                deletes -= line == "DELETED"
            child.kill()  # SIGKILL, wherever the next delete is
        finally:
            child.close()
        indexed, expected = _agreement(db)
        assert indexed == expected, where
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] < 2_000
    finally:
        conn.close()
