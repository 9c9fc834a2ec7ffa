"""Where the cost of erasing a deleted event from the recall index goes: the single index
of schema 8 against the shards of schema 9, on files of the same events.

Run: ``.venv/bin/python scripts/bench_recall_delete.py [--events N] [--deletes N]``. Two
files of ``--events`` generated events (``bench_recall.build_file``): one as schema 8
wrote it (one FTS5 table holding every event), one with the current shards. On each,
``--deletes`` times one event at random, each step timed apart with a plain connection
(``secure_delete`` on, as the store opens its files):

- schema 8: the ``DELETE`` (its trigger deletes the index row), the merge of the whole
  index (``'optimize'``) that left no posting of it, the same merge with
  ``secure_delete`` off (what zeroing the freed pages costs), and the WAL's truncation;
- shards: the ``DELETE`` with the work of the store's ``write_txn`` before ``COMMIT``
  (``index_pending``: the row erased from its shard and that shard merged, or dropped),
  and the WAL's truncation.

Medians over the deletes; the markdown table goes to stdout. Figures on a shared machine
are noisy: compare the two columns of one run.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_recall import Text, build_file  # noqa: E402

from session_server.storage.recall_pending import index_pending  # noqa: E402
from session_server.storage.sqlite_open import connect  # noqa: E402


def timed(fn: Callable[..., object], *args: Any, **kwargs: Any) -> float:
    t = time.perf_counter()
    fn(*args, **kwargs)
    return 1000 * (time.perf_counter() - t)


def checkpoint(conn: sqlite3.Connection) -> None:
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()


def txn(conn: sqlite3.Connection, *statements: str, store: bool = False) -> None:
    conn.execute("BEGIN IMMEDIATE")
    for statement in statements:
        conn.execute(statement)
    if store:
        index_pending(conn)  # what ``write_txn`` runs before every COMMIT
    conn.execute("COMMIT")


def bench(path: Path, seqs: list[int], *, sharded: bool) -> dict[str, float]:
    conn = connect(path, synchronous="NORMAL", busy_timeout_ms=5000, readonly=False)
    parts: dict[str, list[float]] = {}

    def note(name: str, ms: float) -> None:
        parts.setdefault(name, []).append(ms)

    try:
        merge = "INSERT INTO events_fts(events_fts) VALUES ('optimize')"
        for seq in seqs:
            delete = f"DELETE FROM events WHERE id = 's-e{seq}'"
            if sharded:
                note("delete + its shard merged", timed(txn, conn, delete, store=True))
            else:
                note("delete", timed(txn, conn, delete))
                note("whole index merged", timed(txn, conn, merge))
            note("WAL truncated", timed(checkpoint, conn))
        if not sharded:
            conn.execute("PRAGMA secure_delete=OFF")
            for seq in seqs[:3]:
                txn(conn, f"DELETE FROM events WHERE id = 's-e{seq + 1}'")
                note("whole index merged, secure_delete off", timed(txn, conn, merge))
                checkpoint(conn)
    finally:
        conn.close()
    return {name: statistics.median(values) for name, values in parts.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--deletes", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    text = Text(random.Random(args.seed))
    seqs = random.Random(args.seed).sample(range(1, args.events, 2), args.deletes)
    lines = [
        f"{args.events:,} events; median of {args.deletes} deletes of one event",
        "",
        "| step | schema 8: one index | schema 9: shards |",
        "|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        single = Path(tmp) / "v8" / "agent.sqlite"
        build_file(single, text, args.events, indexed=False)
        old = bench(single, seqs, sharded=False)
        single.unlink()
        sharded = Path(tmp) / "v9" / "agent.sqlite"
        build_file(sharded, text, args.events, indexed=True)
        new = bench(sharded, seqs, sharded=True)
    for name in [*old, *(n for n in new if n not in old)]:
        a = f"{old[name]:.0f} ms" if name in old else "–"
        b = f"{new[name]:.0f} ms" if name in new else "–"
        lines.append(f"| {name} | {a} | {b} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
