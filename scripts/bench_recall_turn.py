"""Where the recall index's per-turn cost goes: one write transaction of a 4-event turn
on a real agent file, with and without the index, and the parts of the index's cost.

Run: ``.venv/bin/python scripts/bench_recall_turn.py [--turns N] [--rounds N]
[--sync FULL NORMAL]``. Each round makes a fresh file (``schema.sql`` through
``migrate``) per variant and appends ``--turns`` turns (user message, tool call, tool
result, answer; some 230 words of generated text per turn, as ``bench_recall.py``) in one
``BEGIN IMMEDIATE`` ... ``COMMIT`` each, as the store's appends do. Variants:

- ``no index``: the index's triggers dropped, nothing indexed (the same build without it);
- ``store path``: the triggers queue each event in ``recall_pending``, and
  ``index_pending`` indexes the queue into the current shard before ``COMMIT`` (what the
  store does: the queue, the shard's lookup and its registry row included);
- ``direct``: no trigger, the turn's events written from Python to one FTS5 table
  (what indexing costs without the queue and the shards' bookkeeping: FTS5's own work);
- ``queue only``: the triggers queue the events but the turn does not index them (what a
  turn would cost if the index were built from the queue after the turn, in batches:
  measured to show the lower bound; the store does not do this).

Variants run interleaved in every round (the machine is shared); the figure of a variant
is the median over rounds of its per-round median turn. Also printed: the Python part
(``indexed_text``) and FTS5's CPU part on an in-memory table (tokenising the insert, and
flushing the segment at ``COMMIT``). The markdown table goes to stdout.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from bench_recall import Text  # noqa: E402

from session_server.storage.recall_pending import index_pending  # noqa: E402
from session_server.storage.recall_shards import TOKENIZE  # noqa: E402
from session_server.storage.sqlite_open import connect, migrate  # noqa: E402
from session_server.values.codec import encode_json  # noqa: E402
from session_server.values.recall import indexed_text  # noqa: E402

Row = tuple[str, str, str | None]
TRIGGERS = ("events_fts_insert", "events_fts_delete", "events_fts_update")


def turn_rows(text: Text, n: int) -> list[Row]:
    call = {
        "toolCalls": [{"id": f"c{n}", "name": "search_docs", "arguments": {"q": text.sentence()}}]
    }
    result = {"toolCallId": f"c{n}", "toolName": "search_docs", "isSuccess": True}
    return [
        ("user_message", text.para(1, 2), None),
        ("tool_call_request", "", encode_json(call)),
        ("tool_result", text.para(3, 10), encode_json(result)),
        ("agent_message", text.para(1, 4), None),
    ]


def setup(conn: sqlite3.Connection, variant: str) -> None:
    migrate(conn)
    conn.execute(
        "INSERT INTO sessions(id, agent_id, created_at, updated_at, last_seq, last_turn)"
        " VALUES ('s', 'a', 1, 1, 0, 0)"
    )
    if variant in ("store path", "queue only"):
        return
    for name in TRIGGERS:
        conn.execute(f"DROP TRIGGER {name}")
    if variant.startswith("direct"):  # one FTS5 table, as the index was before its shards
        conn.execute(f"CREATE VIRTUAL TABLE events_fts USING fts5(text, {TOKENIZE})")


def one_file(path: Path, variant: str, sync: str, turns: list[list[Row]]) -> float:
    """The median time of one turn's write transaction, in ms."""
    conn = connect(path, synchronous=sync, busy_timeout_ms=5000, readonly=False)
    try:
        setup(conn, variant)
        direct = variant.startswith("direct")
        seq = 0
        times: list[float] = []
        for n, rows in enumerate(turns):
            t = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            indexed: list[tuple[int | None, str]] = []
            for action, content, meta in rows:
                seq += 1
                cur = conn.execute(
                    "INSERT INTO events(id, session_id, seq, action, content, metadata,"
                    " created_at, turn, turn_start_seq) VALUES (?, 's', ?, ?, ?, ?, 1, ?, ?)",
                    (f"e{seq}", seq, action, content, meta, n + 1, 4 * n + 1),
                )
                if direct and (body := indexed_text(action, content, meta)) is not None:
                    indexed.append((cur.lastrowid, body))
            if indexed:
                conn.executemany("INSERT INTO events_fts(rowid, text) VALUES (?, ?)", indexed)
            if variant != "queue only":
                index_pending(conn)  # what write_txn runs before every COMMIT
            conn.execute("COMMIT")
            if n >= 10:  # the first turns warm the caches
                times.append(time.perf_counter() - t)
        return 1000 * statistics.median(times)
    finally:
        conn.close()


def cpu_parts(turns: list[list[Row]]) -> dict[str, float]:
    """Per turn, in ms: ``indexed_text``; FTS5 insert and flush on an in-memory table."""
    t = time.perf_counter()
    bodies = [[indexed_text(*row) or "" for row in rows] for rows in turns]
    python_ms = 1000 * (time.perf_counter() - t) / len(turns)
    conn = sqlite3.connect(":memory:", isolation_level=None)
    conn.execute(f"CREATE VIRTUAL TABLE f USING fts5(text, {TOKENIZE})")
    insert: list[float] = []
    flush: list[float] = []
    rowid = 0
    for texts in bodies:
        t0 = time.perf_counter()
        conn.execute("BEGIN")
        for body in texts:
            rowid += 1
            conn.execute("INSERT INTO f(rowid, text) VALUES (?, ?)", (rowid, body))
        t1 = time.perf_counter()
        conn.execute("COMMIT")
        flush.append(time.perf_counter() - t1)
        insert.append(t1 - t0)
    conn.close()
    return {
        "indexed_text": python_ms,
        "fts5 insert (tokenise)": 1000 * statistics.median(insert),
        "fts5 flush at COMMIT": 1000 * statistics.median(flush),
    }


VARIANTS = ("no index", "store path", "direct", "queue only")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sync", nargs="+", default=["FULL", "NORMAL"])
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    text = Text(random.Random(args.seed), vocabulary=20_000)
    turns = [turn_rows(text, n) for n in range(args.turns + 10)]
    words = statistics.mean(sum(len((r[1] or "").split()) for r in rows) for rows in turns)
    lines = [
        f"turns of 4 events, {words:.0f} words on average; {args.rounds} interleaved rounds",
        "",
        "| synchronous | variant | turn's transaction (median of rounds) | vs no index |",
        "|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as tmp:
        for sync in args.sync:
            per: dict[str, list[float]] = {v: [] for v in VARIANTS}
            for r in range(args.rounds):
                for i, variant in enumerate(VARIANTS):
                    path = Path(tmp) / f"{sync}-{r}-{i}.sqlite"
                    per[variant].append(one_file(path, variant, sync, turns))
            base = statistics.median(per["no index"])
            for variant in VARIANTS:
                ms = statistics.median(per[variant])
                lines.append(
                    f"| {sync} | {variant} | {ms:.3f} ms | {ms - base:+.3f} ms "
                    f"({100 * (ms / base - 1):+.0f}%) |"
                )
    lines += ["", "| CPU part per turn | ms |", "|---|---|"]
    lines += [f"| {k} | {v:.3f} |" for k, v in cpu_parts(turns).items()]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
