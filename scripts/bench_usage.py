"""Usage and retention benchmark (issue 37).

Run: ``.venv/bin/python scripts/bench_usage.py [--turns N] [--rounds R] [--usage-turns N]
[--sessions N] [--synchronous FULL|NORMAL]``. On fresh files in a temporary directory:

(a) the per-turn cost of storing usage: ``persist_working_context`` of a 2-message turn
    through the local API, with and without ``usage`` (OpenAI chat shape with cached and
    reasoning details, and a model), and with usage given but its storing step replaced
    by a no-op (``_StoreSwitch``: what usage costs besides storing it), ``--turns`` x
    ``--rounds`` turns of each interleaved one by one in three sessions of one agent;
    the ratios of the medians of single turns.
(b) ``memory.usage`` at ``--usage-turns`` turns (default 100k): the rows are written by the
    store's own ``turn_usage`` (one turn of one event each, 1,000 sessions, 3 models, 30
    days) in one transaction, then ``memory.usage`` is timed (p50 and p95 of 50 calls) for the whole
    agent, per model, per day, per session, one session, and a window that is not whole
    days (it reads the turn rows, not the running totals).
(c) a retention sweep of ``--sessions`` expired sessions (default 10k; 2 events each):
    the time of ``sweep_retention``, the longest wait of a client reading another session
    of the same agent meanwhile (``build_working_context`` every 2 ms) and of one writing
    a turn to another session every 10 ms (a write waits for the sweep's step in the
    mailbox), and the disk space
    the deleted rows freed (SQLite free pages times the page size; the file does not
    shrink without VACUUM) and the WAL left after the sweep.

Timings on a shared machine are noisy; the report says which run they come from.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from session_server import ActorRegistry
from session_server.storage import sqlite_ops
from session_server.storage.usage_rows import turn_usage
from session_server.values.context import WorkingContext
from session_server.values.events import ContextMessage
from session_server.values.usage import UsageTotals
from tests.support.bench_env import token_mode, use_shared_tiktoken

DAY_MS = 86_400_000
USAGE = {
    "prompt_tokens": 1200,
    "completion_tokens": 300,
    "prompt_tokens_details": {"cached_tokens": 1000},
    "completion_tokens_details": {"reasoning_tokens": 120},
}


def turn(n: int) -> WorkingContext:
    ctx = WorkingContext()
    ctx.add_message(ContextMessage(role="user", content=f"question {n} about the weather"))
    ctx.add_message(ContextMessage(role="assistant", content=f"answer {n}: sunny, 21 degrees"))
    return ctx


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class _StoreSwitch:
    """Replaces ``sqlite_ops.turn_usage`` (the step of the append that stores a turn's
    usage) while ``off``: the same turns, usage given and checked, nothing stored. It
    splits the overhead of usage into storing it and the rest (the pressure check that
    usage triggers, ``normalise_usage``, the budget check, the metrics)."""

    def __init__(self) -> None:
        self.off = False
        self.real = sqlite_ops.turn_usage
        sqlite_ops.turn_usage = self  # type: ignore[assignment]

    def __call__(self, *args: Any) -> tuple[str | None, str | None]:
        return (None, None) if self.off else self.real(*args)

    def restore(self) -> None:
        sqlite_ops.turn_usage = self.real


async def per_turn(root: Path, turns: int, rounds: int, sync: Any) -> dict[str, float]:
    """Turns without usage, with usage, and with usage not stored, interleaved one by
    one in rotating order (so a change of the machine's load hits all alike); the
    medians of the single-turn times."""
    switch = _StoreSwitch()
    try:
        async with ActorRegistry(root, idle_timeout=None, synchronous=sync) as reg:
            actor = await reg.get("per-turn")
            series: list[tuple[str, dict[str, Any] | None, bool, list[float]]] = []
            for name, usage, stored in (
                ("plain", None, True),
                ("kept", USAGE, True),
                ("given", USAGE, False),
            ):
                sid = await actor.create_session(session_id=name)
                series.append((sid, usage, stored, []))
            for n in range(50 + turns * rounds):
                k = n % len(series)
                for sid, usage, stored, out in series[k:] + series[:k]:
                    switch.off = not stored
                    start = time.perf_counter()
                    await actor.persist_working_context(
                        sid, turn(n), usage=usage, model="gpt" if usage else None
                    )
                    if n >= 50:  # after a warm-up
                        out.append(time.perf_counter() - start)
    finally:
        switch.restore()
    a, b, c = (statistics.median(s[3]) for s in series)
    return {
        "without_us": a * 1e6,
        "with_us": b * 1e6,
        "given_us": c * 1e6,
        "overhead_pct": (b / a - 1) * 100,
        "storing_pct": (b / c - 1) * 100,
    }


async def usage_queries(root: Path, turns: int) -> dict[str, tuple[float, float]]:
    async with ActorRegistry(root, idle_timeout=None) as reg:
        actor = await reg.get("totals")
        sessions = [await actor.create_session(session_id=f"s{i:04d}") for i in range(1000)]
        path = root / "agents" / "totals" / "agent.sqlite"
    rng = random.Random(7)
    start_ms = int(time.time() * 1000) - 30 * DAY_MS
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    states: dict[str, str | None] = dict.fromkeys(sessions)
    seqs: dict[str, int] = dict.fromkeys(sessions, 0)
    for i in range(turns):
        sid = sessions[i % len(sessions)]
        created = start_ms + int(i * 30 * DAY_MS / turns)
        usage = UsageTotals(
            rng.randint(500, 50_000),
            rng.randint(10, 2000),
            rng.randint(0, 400),
            0,
            rng.randint(0, 10),
            model=("gpt", "claude", "llama")[i % 3],
        )
        # What a turn's append writes: the turn's last event with its usage, the
        # session's totals (``usage_rows.turn_usage``, which closes a day when it changes).
        record, states[sid] = turn_usage(conn, sid, states[sid], usage, created)
        seqs[sid] += 1
        conn.execute(
            "INSERT INTO events (id, session_id, seq, action, content, created_at, turn, usage)"
            " VALUES (?, ?, ?, 'agent_message', 'a', ?, ?, ?)",
            (f"e{i}", sid, seqs[sid], created, seqs[sid], record),
        )
    conn.executemany(
        "UPDATE sessions SET usage = ?, last_seq = ?, last_turn = ? WHERE id = ?",
        [(states[sid], seqs[sid], seqs[sid], sid) for sid in sessions],
    )
    conn.execute("DELETE FROM recall_pending")  # the benchmark does not search
    conn.execute("COMMIT")
    conn.close()
    out: dict[str, tuple[float, float]] = {}
    async with ActorRegistry(root, idle_timeout=None) as reg:
        actor = await reg.get("totals")
        cases: dict[str, dict[str, Any]] = {
            "agent": {},
            "by model": {"group_by": "model"},
            "by day": {"group_by": "day"},
            "by session": {"group_by": "session"},
            "one session": {"session_id": "s0042"},
            "window (turn rows)": {
                "since": start_ms + 5 * DAY_MS + 1,
                "until": start_ms + 20 * DAY_MS,
            },
        }
        for name, params in cases.items():
            times = []
            for _ in range(50):
                t0 = time.perf_counter()
                await actor.memory_usage(**params)
                times.append((time.perf_counter() - t0) * 1000)
            out[name] = (pct(times, 0.5), pct(times, 0.95))
    return out


async def sweep(root: Path, sessions: int) -> dict[str, float]:
    async with ActorRegistry(root, idle_timeout=None) as reg:
        actor = await reg.get("sweep")
        reader = await actor.create_session(session_id="reader")
        await actor.persist_working_context(reader, turn(0))
        await actor.retention_set({"max_idle_days": 100}, session_id=reader)
        batch = 200
        for start in range(0, sessions, batch):
            ids = await asyncio.gather(
                *(
                    actor.create_session(session_id=f"x{i:06d}")
                    for i in range(start, min(sessions, start + batch))
                )
            )
            await asyncio.gather(
                *(
                    actor.persist_working_context(sid, turn(n), usage=USAGE)
                    for n, sid in enumerate(ids)
                )
            )
        await actor.retention_set({"max_idle_days": 1})
        path = root / "agents" / "sweep" / "agent.sqlite"
        size_before = path.stat().st_size
        stalls: list[float] = []
        done = asyncio.Event()

        async def read_loop() -> None:
            while not done.is_set():
                t0 = time.perf_counter()
                await actor.build_working_context(reader)
                stalls.append((time.perf_counter() - t0) * 1000)
                await asyncio.sleep(0.002)  # a client calling every 2 ms

        writer = await actor.create_session(session_id="writer")
        await actor.retention_set({"max_idle_days": 100}, session_id=writer)
        writes: list[float] = []

        async def write_loop() -> None:
            n = 0
            while not done.is_set():
                t0 = time.perf_counter()
                await actor.persist_working_context(writer, turn(n))
                writes.append((time.perf_counter() - t0) * 1000)
                n += 1
                await asyncio.sleep(0.01)  # a client writing a turn every 10 ms

        reading = asyncio.create_task(read_loop())
        writing = asyncio.create_task(write_loop())
        t0 = time.perf_counter()
        erased = 0
        while True:
            result = await actor.sweep_retention(
                now_ms=int(time.time() * 1000) + 2 * DAY_MS, max_steps=200
            )
            erased += result["sessions"]
            if not result["more"]:
                break
        elapsed = time.perf_counter() - t0
        done.set()
        await reading
        await writing
    conn = sqlite3.connect(path)
    free = (
        conn.execute("PRAGMA freelist_count").fetchone()[0]
        * conn.execute("PRAGMA page_size").fetchone()[0]
    )
    conn.close()
    wal = path.with_name(path.name + "-wal")
    return {
        "erased": erased,
        "seconds": elapsed,
        "per_session_ms": elapsed / max(1, erased) * 1000,
        "reader_p50_ms": pct(stalls, 0.5),
        "reader_max_ms": max(stalls) if stalls else 0.0,
        "reader_calls": len(stalls),
        "writer_p50_ms": pct(writes, 0.5),
        "writer_p99_ms": pct(writes, 0.99),
        "writer_max_ms": max(writes) if writes else 0.0,
        "writer_calls": len(writes),
        "file_bytes": size_before,
        "freed_bytes": free,
        "wal_bytes_after": wal.stat().st_size if wal.exists() else 0,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--usage-turns", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=10_000)
    parser.add_argument("--synchronous", choices=("FULL", "NORMAL"), default="FULL")
    args = parser.parse_args()
    use_shared_tiktoken()
    print(f"token counts: {token_mode()}; synchronous={args.synchronous}; noisy shared machine")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        a = await per_turn(root / "a", args.turns, args.rounds, args.synchronous)
        print(
            f"\n(a) persist of a 2-message turn: {a['without_us']:.0f} us without usage, "
            f"{a['with_us']:.0f} us with usage: {a['overhead_pct']:+.1f}%; "
            f"{a['given_us']:.0f} us with usage given but not stored: storing it costs "
            f"{a['storing_pct']:+.1f}% (medians of {args.turns * args.rounds} interleaved "
            "turns each)"
        )
        b = await usage_queries(root / "b", args.usage_turns)
        print(f"\n(b) memory.usage at {args.usage_turns} turns (1000 sessions, 3 models, 30 days)")
        print("| query | p50 ms | p95 ms |\n|---|---|---|")
        for name, (p50, p95) in b.items():
            print(f"| {name} | {p50:.2f} | {p95:.2f} |")
        c = await sweep(root / "c", args.sessions)
        print(f"\n(c) retention sweep of {c['erased']} expired sessions (2 events each)")
        print(
            f"{c['seconds']:.1f} s ({c['per_session_ms']:.2f} ms per session); a reader of "
            f"another session meanwhile: p50 {c['reader_p50_ms']:.2f} ms, longest "
            f"{c['reader_max_ms']:.1f} ms over {c['reader_calls']} calls; a writer of another "
            f"session (a turn every 10 ms): p50 {c['writer_p50_ms']:.1f} ms, p99 "
            f"{c['writer_p99_ms']:.1f} ms, longest {c['writer_max_ms']:.1f} ms over "
            f"{c['writer_calls']} turns; file "
            f"{c['file_bytes'] / 1e6:.1f} MB, freed {c['freed_bytes'] / 1e6:.1f} MB "
            f"(free pages), WAL after {c['wal_bytes_after']} bytes"
        )


if __name__ == "__main__":
    asyncio.run(main())
