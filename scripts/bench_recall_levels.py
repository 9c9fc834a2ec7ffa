"""The recall index's purge on SQLite's FTS5: level growth and the cost of a rebuild.

Run: ``.venv/bin/python scripts/bench_recall_levels.py [--events N] [--cycles C]``. On a
fresh agent file (``AgentStore``, synchronous NORMAL) with ``--events`` indexed events:

(a) ``--cycles`` cycles of what a retention sweep beside a writing client does (a turn
    indexed in its own transaction, one event deleted, the purge after it), and the
    FTS5 structure's level count every 100 cycles: on SQLite 3.40 it grows by about two
    per purge and the purge rebuilds the index at ``REBUILD_LEVELS``; later versions
    keep it bounded;
(b) the time of one purge by 'optimize' and one by 'rebuild' (the index made again from
    its content) at that size, so the cost of the rebuild, one every ~500 purges on the
    old FTS5, can be set against the optimizes it replaces.

Timings on a shared machine are noisy; say so with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from session_server.storage import recall_sql
from session_server.storage.recall_levels import REBUILD_LEVELS, index_levels
from session_server.storage.store import AgentStore


def _add(conn: sqlite3.Connection, n: int) -> None:
    conn.execute(
        "INSERT INTO events(id, session_id, seq, action, content, created_at)"
        " VALUES (?, ?, 1, 'user_message', ?, 1)",
        (f"e{n}", f"s{n}", f"question {n} about the weather, and a few words more {n % 97}"),
    )


def _delete(conn: sqlite3.Connection, n: int) -> None:
    conn.execute("DELETE FROM events WHERE id = ?", (f"e{n}",))


def _merge(command: str) -> Callable[[sqlite3.Connection], float]:
    def body(conn: sqlite3.Connection) -> float:
        t0 = time.perf_counter()
        conn.execute(f"INSERT INTO events_fts(events_fts) VALUES ('{command}')")
        return time.perf_counter() - t0

    return body


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--cycles", type=int, default=1_200)
    args = parser.parse_args()
    print(f"SQLite {sqlite3.sqlite_version}; rebuild at {REBUILD_LEVELS} levels; noisy machine")
    with tempfile.TemporaryDirectory() as tmp:
        store = await AgentStore.open(Path(tmp) / "agent.sqlite", "bench", synchronous="NORMAL")
        try:
            await store.transact("seed", lambda c: [_add(c, n) for n in range(args.events)])
            t0 = time.perf_counter()
            for n in range(args.cycles):
                await store.transact("turn", _add, args.events + n)
                await store.transact("delete", _delete, n)
                await store.transact("recall purge", recall_sql.purge)
                if n % 100 == 99:
                    print(f"(a) after {n + 1} purges: {await store.query(index_levels)} levels")
            per_cycle = (time.perf_counter() - t0) / args.cycles * 1000
            print(f"(a) {per_cycle:.2f} ms per cycle (turn, delete, purge)")
            for command in ("optimize", "rebuild"):
                await store.transact("delete", _delete, args.cycles)
                seconds = await store.transact("merge", _merge(command))
                print(f"(b) '{command}' at {args.events} events: {seconds * 1000:.1f} ms")
                args.cycles += 1
        finally:
            await store.close()


if __name__ == "__main__":
    asyncio.run(main())
