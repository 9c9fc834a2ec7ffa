"""Recall benchmark: search latency, the index's cost per turn and on disk, the backfill
of a migrated file and what it does to another client.

Run: ``.venv/bin/python scripts/bench_recall.py [--events N ...] [--turns N] [--rounds N]
[--queries N] [--turns-only]``. On fresh files in a temporary directory:

1. **Search** over ``--events`` events (100000 by default; ``--events 100000 1000000``
   for both) of generated text: a vocabulary of 50,000 made-up words drawn with Zipf's
   law (as words are in real text), 40,000 sentences of 6-30 words, user messages of 1-3
   sentences, answers of 2-8, tool calls with JSON arguments, tool results of 5-40
   sentences. Queries (``--queries``, 300): a common word, a rare word, two words, a
   two-word phrase taken from a stored event; timed through ``AgentActor.search``
   (the worker-thread hop included), 10 hits each.
2. **Size**: the index's pages (``dbstat``: ``events_fts*``) against the events table's
   and its indexes'; and the cost of deleting one event (10 events at random, one per
   ``events.delete``: each merges the shard that held the event, so that no posting of
   it is left).
3. **Per turn**: sequential 4-event turns (``build_working_context`` +
   ``persist_working_context``) on a file with the index's triggers and on the same file
   without them, at FULL and NORMAL, in alternating rounds (the figure: the median over
   rounds of each round's median turn).
4. **Migration**: a version-8 file (one index holding every event, as files written
   before the shards) of the same events opened by a registry: the open (the migration
   drops the old index), the background backfill's throughput (events/s), and meanwhile
   another agent of the same registry runs sequential turns and searches: its longest
   call against the same loop without a backfill.

``--parts search turns migration`` picks what to measure.

Figures on a shared machine are noisy: compare the ratios of one run. The markdown table
goes to stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from session_server.runtime.registry import ActorRegistry  # noqa: E402
from session_server.storage.recall_pending import index_pending  # noqa: E402
from session_server.storage.sqlite_open import connect, migrate  # noqa: E402
from session_server.values.codec import encode_json  # noqa: E402
from session_server.values.events import ContextMessage, ToolCall  # noqa: E402
from session_server.values.recall import indexed_text  # noqa: E402
from tests.support.old_schema import undo_to  # noqa: E402

AGENT = "bench-recall"
SYLLABLES = [
    c + v
    for c in [
        "b",
        "c",
        "d",
        "f",
        "g",
        "h",
        "j",
        "k",
        "l",
        "m",
        "n",
        "p",
        "r",
        "s",
        "t",
        "v",
        "w",
        "z",
        "br",
        "ch",
        "cl",
        "dr",
        "fr",
        "gr",
        "pl",
        "pr",
        "sh",
        "st",
        "th",
        "tr",
    ]
    for v in ["a", "e", "i", "o", "u", "ai", "ea", "ou", "io", "ee"]
]


class Text:
    """Made-up words with Zipf frequencies; sentences and events of them."""

    def __init__(self, rng: random.Random, vocabulary: int = 50_000) -> None:
        self.rng = rng
        words: set[str] = set()
        while len(words) < vocabulary:
            words.add("".join(rng.choices(SYLLABLES, k=rng.choice((1, 2, 2, 3, 3, 4)))))
        self.words = sorted(words, key=lambda _: rng.random())
        weights = [1.0 / (r**1.07) for r in range(1, vocabulary + 1)]
        total = 0.0
        self.cum: list[float] = []
        for w in weights:
            total += w
            self.cum.append(total)

        # Drawing words is slow in Python: events are made of 40,000 sentences drawn
        # once (some 700,000 word occurrences), picked at random.
        self.pool = [self._draw() for _ in range(40_000)]

    def _draw(self) -> str:
        words = self.rng.choices(self.words, cum_weights=self.cum, k=self.rng.randint(6, 30))
        return " ".join(words).capitalize() + "."

    def sentence(self) -> str:
        return self.rng.choice(self.pool)

    def para(self, low: int, high: int) -> str:
        return " ".join(self.sentence() for _ in range(self.rng.randint(low, high)))


def event_rows(text: Text, session: str, count: int, first_rowid: int) -> list[tuple[Any, ...]]:
    """``count`` events of 4-event turns (user, tool call, tool result, answer)."""
    rows = []
    for i in range(count):
        seq = i + 1
        kind = i % 4
        meta: Any = None
        if kind == 0:
            action, content = "user_message", text.para(1, 3)
        elif kind == 1:
            action, content = "tool_call_request", ""
            args = {"query": text.sentence(), "limit": text.rng.randint(1, 50)}
            meta = {"toolCalls": [{"id": f"c{seq}", "name": "search_docs", "arguments": args}]}
        elif kind == 2:
            action, content = "tool_result", text.para(5, 40)
            meta = {"toolCallId": f"c{seq - 1}", "toolName": "search_docs", "isSuccess": True}
        else:
            action, content = "agent_message", text.para(2, 8)
        turn = i // 4 + 1
        rows.append(
            (
                f"{session}-e{seq}",
                session,
                seq,
                action,
                content,
                None if meta is None else encode_json(meta),
                1_700_000_000_000 + seq,
                turn,
                4 * (turn - 1) + 1,
            )
        )
    return rows


def build_file(path: Path, text: Text, events: int, *, indexed: bool) -> list[str]:
    """An agent file with ``events`` events in one session (``indexed``: the current
    schema, indexed in shards; else version 8, as files written before the shards: one
    index ``events_fts`` holding every event). Returns a sample of stored contents."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = connect(path, synchronous="NORMAL", busy_timeout_ms=5000, readonly=False)
    migrate(conn)
    if not indexed:
        for statement in undo_to(8):
            conn.execute(statement)
        conn.execute("PRAGMA user_version=8")
    conn.execute("BEGIN")
    conn.execute(
        "INSERT INTO sessions(id, agent_id, created_at, updated_at, last_seq, last_turn)"
        " VALUES ('s', ?, 1, 1, ?, ?)",
        (AGENT, events, (events + 3) // 4),
    )
    sample: list[str] = []
    for start in range(0, events, 10_000):
        rows = event_rows(text, "s", min(10_000, events - start), start)
        rows = [
            (f"s-e{start + r[2]}", r[1], start + r[2], *r[3:7], start // 4 + r[7], start + r[8])
            for r in rows
        ]
        conn.executemany(
            "INSERT INTO events(id, session_id, seq, action, content, metadata, created_at,"
            " turn, turn_start_seq) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        sample.extend(str(r[4]) for r in rows[::500] if r[4])
    if indexed:
        index_pending(conn)  # what the store does before each commit
    else:  # what version 8 held: every event in its one index
        conn.execute("DELETE FROM agent_settings WHERE key = 'recall_backfill'")
        conn.execute("DELETE FROM recall_pending")
        cur = conn.execute("SELECT rowid, action, content, metadata FROM events")
        while batch := cur.fetchmany(5_000):
            conn.executemany(
                "INSERT INTO events_fts(rowid, text) VALUES (?, ?)",
                [(r[0], t) for r in batch if (t := indexed_text(r[1], r[2], r[3])) is not None],
            )
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return sample


def sizes(path: Path) -> tuple[int, int]:
    conn = sqlite3.connect(path)
    try:
        fts = conn.execute(
            "SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name LIKE 'events_fts%'"
        ).fetchone()[0]
        events = conn.execute(
            "SELECT coalesce(sum(pgsize), 0) FROM dbstat WHERE name = 'events'"
            " OR name LIKE 'idx_events%' OR name LIKE 'sqlite_autoindex_events%'"
        ).fetchone()[0]
        return int(fts), int(events)
    finally:
        conn.close()


def queries(text: Text, sample: Sequence[str], n: int) -> list[str]:
    rng = text.rng
    out = []
    for i in range(n):
        kind = i % 4
        if kind == 0:
            out.append(text.words[rng.randint(20, 500)])
        elif kind == 1:
            out.append(text.words[rng.randint(5_000, 40_000)])
        elif kind == 2:
            out.append(f"{text.words[rng.randint(50, 3000)]} {text.words[rng.randint(50, 3000)]}")
        else:
            words = rng.choice(sample).rstrip(".").split()
            j = rng.randrange(max(1, len(words) - 1))
            out.append('"' + " ".join(words[j : j + 2]).lower() + '"')
    return out


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def bench_search(root: Path, text: Text, events: int, n_queries: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    sample = build_file(root / "agents" / AGENT / "agent.sqlite", text, events, indexed=True)
    build_s = time.perf_counter() - t0
    fts, ev = sizes(root / "agents" / AGENT / "agent.sqlite")
    qs = queries(text, sample, n_queries)
    async with ActorRegistry(root, idle_timeout=None, mirror=False) as reg:
        actor = await reg.get(AGENT)
        for q in qs[:20]:  # warm the page cache
            await actor.search(q)
        times, hits = [], 0
        for q in qs:
            t = time.perf_counter()
            found = await actor.search(q)
            times.append(time.perf_counter() - t)
            hits += len(found["hits"])
        # A delete merges the shards of what it deleted (the purge of the deleted
        # postings) in its transaction, then the WAL is truncated.
        deletes = []
        for seq in text.rng.sample(range(1, events + 1), 10):
            t = time.perf_counter()
            await actor.delete_events("s", [f"s-e{seq}"])
            deletes.append(time.perf_counter() - t)
    conn = sqlite3.connect(root / "agents" / AGENT / "agent.sqlite")
    try:
        try:
            shards = conn.execute("SELECT count(*) FROM events_fts_shards").fetchone()[0]
        except sqlite3.OperationalError:  # a build before the shards: one index
            shards = 1
    finally:
        conn.close()
    return {
        "delete_s": statistics.median(deletes),
        "delete_max_s": max(deletes),
        "shards": shards,
        "events": events,
        "build_s": build_s,
        "p50_ms": 1000 * pct(times, 0.5),
        "p99_ms": 1000 * pct(times, 0.99),
        "max_ms": 1000 * max(times),
        "hits_per_query": hits / len(qs),
        "fts_mib": fts / 2**20,
        "events_mib": ev / 2**20,
    }


def turn(n: int, text: Text) -> list[ContextMessage]:
    call = f"call-{n}"
    return [
        ContextMessage(role="user", content=text.para(1, 2)),
        ContextMessage(
            role="assistant",
            tool_calls=[ToolCall(id=call, name="search_docs", arguments={"q": text.sentence()})],
        ),
        ContextMessage(
            role="tool", tool_call_id=call, name="search_docs", content=text.para(3, 10)
        ),
        ContextMessage(role="assistant", content=text.para(1, 4)),
    ]


def drop_triggers(path: Path) -> None:
    conn = sqlite3.connect(path)
    try:
        for name in ("events_fts_insert", "events_fts_delete", "events_fts_update"):
            conn.execute(f"DROP TRIGGER {name}")
        conn.commit()
    finally:
        conn.close()


async def turns_once(root: Path, text: Text, sync: str, turns: int, indexed: bool) -> list[float]:
    async with ActorRegistry(root, synchronous=sync, mirror=False) as reg:  # type: ignore[arg-type]
        actor = await reg.get(AGENT)
        await actor.create_session(session_id="s")
    if not indexed:
        drop_triggers(root / "agents" / AGENT / "agent.sqlite")
    texts = [turn(n, text) for n in range(1, turns + 11)]
    durations = []
    async with ActorRegistry(root, synchronous=sync, mirror=False) as reg:  # type: ignore[arg-type]
        actor = await reg.get(AGENT)
        for n, messages in enumerate(texts):
            t = time.perf_counter()
            ctx = await actor.build_working_context("s", limit=50)
            ctx.add_messages(messages)
            await actor.persist_working_context("s", ctx)
            if n >= 10:
                durations.append(time.perf_counter() - t)
    return durations


async def bench_turns(root: Path, text: Text, turns: int, rounds: int) -> dict[str, float]:
    out: dict[str, float] = {}
    for sync in ("FULL", "NORMAL"):
        with_idx: list[float] = []
        without: list[float] = []
        for r in range(rounds):  # interleaved; a round's figure is its median turn
            idx = await turns_once(root / f"{sync}-i{r}", text, sync, turns, True)
            with_idx.append(statistics.median(idx))
            no_idx = await turns_once(root / f"{sync}-n{r}", text, sync, turns, False)
            without.append(statistics.median(no_idx))
        out[f"{sync}_with_ms"] = 1000 * statistics.median(with_idx)
        out[f"{sync}_without_ms"] = 1000 * statistics.median(without)
    return out


async def other_client(actor: Any, text: Text, stop: asyncio.Event, n: int) -> list[float]:
    """Sequential turns and searches of another agent until ``stop`` (at least ``n``)."""
    sid = await actor.create_session()
    times: list[float] = []
    i = 0
    while not stop.is_set() or i < n:
        i += 1
        t = time.perf_counter()
        ctx = await actor.build_working_context(sid, limit=50)
        ctx.add_messages(turn(i, text))
        await actor.persist_working_context(sid, ctx)
        times.append(time.perf_counter() - t)
        t = time.perf_counter()
        await actor.search(text.words[i % 1000])
        times.append(time.perf_counter() - t)
    return times


async def bench_migration(root: Path, text: Text, events: int) -> dict[str, float]:
    build_file(root / "agents" / AGENT / "agent.sqlite", text, events, indexed=False)
    async with ActorRegistry(root, idle_timeout=None, mirror=False) as reg:
        other = await reg.get("other-client")
        done = asyncio.Event()
        done.set()
        baseline = await other_client(other, text, done, 100)
        actor = await reg.get(AGENT)
        stop = asyncio.Event()
        t0 = time.perf_counter()
        await actor.store()  # the migration (the old index dropped); the backfill starts
        open_s = time.perf_counter() - t0
        during_task = asyncio.create_task(other_client(other, text, stop, 1))
        await actor.recall_settled()
        backfill_s = time.perf_counter() - t0
        stop.set()
        during = await during_task
        assert (await actor.search("the"))["indexing"] is False
    return {
        "open_s": open_s,
        "events_per_s": events / backfill_s,
        "backfill_s": backfill_s,
        "baseline_max_ms": 1000 * max(baseline),
        "baseline_p99_ms": 1000 * pct(baseline, 0.99),
        "during_max_ms": 1000 * max(during),
        "during_p99_ms": 1000 * pct(during, 0.99),
        "during_calls": len(during),
    }


def emit(lines: Sequence[str]) -> None:
    """Print rows as they are measured (a long run interrupted keeps what it has)."""
    print("\n".join(lines), flush=True)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, nargs="+", default=[100_000])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--parts",
        nargs="+",
        choices=("search", "turns", "migration"),
        default=["search", "turns", "migration"],
        help="what to measure (1.-2., 3., 4.)",
    )
    parser.add_argument("--turns-only", action="store_true", help="only the per-turn cost (3.)")
    args = parser.parse_args()
    parts = {"turns"} if args.turns_only else set(args.parts)
    text = Text(random.Random(args.seed))
    emit(["| measure | figure |", "|---|---|"])
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for n in args.events if "search" in parts else []:
            s = await bench_search(root / f"search-{n}", text, n, args.queries)
            emit(
                [
                    f"| search over {n:,} events, p50 / p99 / max | {s['p50_ms']:.2f} / "
                    f"{s['p99_ms']:.2f} / {s['max_ms']:.2f} ms "
                    f"({s['hits_per_query']:.1f} hits) |",
                    f"| index size at {n:,} events | {s['fts_mib']:.1f} MiB, "
                    f"{s['fts_mib'] / s['events_mib']:.2f}x the events table and indexes "
                    f"({s['events_mib']:.1f} MiB) |",
                    f"| bulk insert of {n:,} events with the index | {s['build_s']:.1f} s |",
                    f"| events.delete of one event at {n:,} events ({s['shards']} shards; "
                    f"its shard merged), median / max of 10 | {1000 * s['delete_s']:.0f} / "
                    f"{1000 * s['delete_max_s']:.0f} ms |",
                ]
            )
            shutil.rmtree(root / f"search-{n}")
        if "turns" in parts:
            t = await bench_turns(root / "turns", text, args.turns, args.rounds)
            for sync in ("FULL", "NORMAL"):
                w, wo = t[f"{sync}_with_ms"], t[f"{sync}_without_ms"]
                emit(
                    [
                        f"| sequential turn, {sync}: with index / without | {w:.3f} / "
                        f"{wo:.3f} ms ({100 * (w / wo - 1):+.1f}%) |"
                    ]
                )
        if "migration" in parts:
            n = args.events[0]
            m = await bench_migration(root / "migration", text, n)
            emit(
                [
                    f"| opening a version-8 file of {n:,} events (the migration drops "
                    f"its single index) | {m['open_s']:.1f} s |",
                    f"| backfill of the migrated file ({n:,} events) | "
                    f"{m['events_per_s']:,.0f} events/s ({m['backfill_s']:.1f} s) |",
                    f"| another agent's calls meanwhile: max / p99 ({m['during_calls']} calls)"
                    f" | {m['during_max_ms']:.1f} / {m['during_p99_ms']:.1f} ms |",
                    f"| the same calls without a backfill: max / p99 | "
                    f"{m['baseline_max_ms']:.1f} / {m['baseline_p99_ms']:.1f} ms |",
                ]
            )


if __name__ == "__main__":
    asyncio.run(main())
