"""Idempotency records are pruned after a documented retention (issue 13, item 8).

``IdempotencyRetention``: a key is kept while it is among the newest ``max_per_session`` of
its session and younger than ``max_age_seconds``; pruning runs in the keyed write's own
transaction each time the session's seq crosses a multiple of ``PRUNE_EVERY_SEQS``. A
replay within retention answers the first result again; a retry after its key was pruned
is a new write. Real server, real sockets, the real SQLite file.
"""

from __future__ import annotations

import sqlite3
import warnings
from pathlib import Path

import pytest

from session_server.client import SessionClient
from session_server.storage.idempotency import (
    PRUNE_EVERY_SEQS,
    IdempotencyRetention,
    prune_idempotency,
)
from tests.support.server import running_server

AGENT = "keys"


def stored_keys(memory: Path) -> list[str]:
    db = sqlite3.connect(
        f"{(memory / 'agents' / AGENT / 'agent.sqlite').as_uri()}?mode=ro", uri=True
    )
    try:
        return sorted(r[0] for r in db.execute("SELECT key FROM idempotency"))
    finally:
        db.close()


async def test_keys_beyond_the_count_are_pruned_and_replays_within_it_still_replay(
    tmp_path: Path,
) -> None:
    memory = tmp_path / "memory"
    options = {"idempotency": IdempotencyRetention(max_per_session=3)}
    async with (
        running_server(memory, synchronous="NORMAL", registry_options=options) as running,
        SessionClient(running.url, AGENT) as client,
    ):
        sid = await client.create_session(session_id="s")
        for n in range(1, PRUNE_EVERY_SEQS):
            await client.append_events(sid, [{"content": f"e{n}"}], idempotency_key=f"k{n:03}")
        # Below the first multiple nothing was pruned (the cost is amortised).
        assert len(stored_keys(memory)) == PRUNE_EVERY_SEQS - 1
        last = PRUNE_EVERY_SEQS
        await client.append_events(sid, [{"content": f"e{last}"}], idempotency_key=f"k{last:03}")
        kept = [f"k{n:03}" for n in range(last - 2, last + 1)]
        assert stored_keys(memory) == kept

        # Within retention: the first answer again, nothing written.
        prev = last - 1
        replay = await client.append_events(
            sid, [{"content": f"e{prev}"}], idempotency_key=f"k{prev:03}"
        )
        assert replay.seqs == [prev]
        assert (await client.get_session(sid))["last_seq"] == last
        # Pruned: the same retry is a new write.
        again = await client.append_events(sid, [{"content": "e1"}], idempotency_key="k001")
        assert again.seqs == [last + 1]
        assert (await client.get_session(sid))["last_seq"] == last + 1


async def test_keys_older_than_the_age_are_pruned(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    async with (
        running_server(memory, synchronous="NORMAL") as running,
        SessionClient(running.url, AGENT) as client,
    ):
        sid = await client.create_session(session_id="s")
        for n in range(1, 4):
            await client.append_events(sid, [{"content": f"e{n}"}], idempotency_key=f"k{n}")
    # k1 is two days old (as if the server had been up that long).
    db = sqlite3.connect(memory / "agents" / AGENT / "agent.sqlite")
    with db:
        db.execute("UPDATE idempotency SET created_at = created_at - 2 * 86400000 WHERE key = 'k1'")
    db.close()
    async with (
        running_server(memory, synchronous="NORMAL") as running,
        SessionClient(running.url, AGENT) as client,
    ):
        many = [{"content": f"x{n}"} for n in range(PRUNE_EVERY_SEQS)]
        await client.append_events(sid, many, idempotency_key="bulk")  # crosses a multiple
        assert stored_keys(memory) == ["bulk", "k2", "k3"]
        replay = await client.append_events(sid, [{"content": "e2"}], idempotency_key="k2")
        assert replay.seqs == [2]
        fresh = await client.append_events(sid, [{"content": "e1"}], idempotency_key="k1")
        assert fresh.seqs == [3 + PRUNE_EVERY_SEQS + 1]


def test_a_retention_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_age_seconds: must be positive"):
        IdempotencyRetention(max_age_seconds=0)
    with pytest.raises(ValueError, match="max_per_session: must be at least 1"):
        IdempotencyRetention(max_per_session=0)


def test_prune_binds_its_parameters_as_every_python_accepts() -> None:
    """Numbered placeholders (``?1``) bound from a sequence warn on Python 3.13 and are an
    error from 3.14; the prune binds names from a mapping."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE idempotency (session_id TEXT, key TEXT, created_at INTEGER)")
    db.executemany(
        "INSERT INTO idempotency VALUES (?, ?, ?)",
        [("s", f"k{i}", i) for i in range(5)] + [("t", "old", 0)],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        removed = prune_idempotency(db, "s", 10, IdempotencyRetention(max_per_session=2))
    assert removed == 3
    assert sorted(r[0] for r in db.execute("SELECT key FROM idempotency")) == ["k3", "k4", "old"]
    db.close()
