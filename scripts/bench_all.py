#!/usr/bin/env python
"""Benchmark report: every figure against its baseline measured in the same run.

Runs, in one process (the load phase against a server subprocess):

1. Store (``scripts/bench_store.py``): per-turn cost of the store vs raw ``sqlite3`` with the
   same schema (the storage limit) vs the OpenAI Agents SDK ``SQLiteSession`` (same turn
   shape, same ``synchronous`` level, WAL everywhere); the JSONL mirror overhead (b+m);
   ``build_working_context`` at 1k and 100k events of history; N agents touched through
   one registry (open files, RSS, cold activation latency).
2. RPC (``scripts/bench_rpc.py``): sequential ``turn.persist`` vs a bare ``websockets`` echo
   of the same request text (the transport limit), and 16 connections on 16 agents.
3. Compaction (``scripts/bench_compaction.py``): tokens of the built context per strategy
   vs no compaction, and the pure build/plan time at 1k/100k events.
4. Load (``tests/support/load.py``): 64 connections over 16 agents against
   ``session-server serve`` for a bounded time: ``turn.persist`` p50/p99, server RSS.

Writes ``BENCHMARKS.md`` (``--out``) with the machine's core count and the date.
``--quick`` is a short run (fewer turns, smaller histories, 500 agents, 3 s of load) for
checking the script, not for the figures.

Run: ``.venv/bin/python scripts/bench_all.py [--quick] [--out BENCHMARKS.md]``
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import shutil
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

import bench_compaction  # noqa: E402
import bench_rpc  # noqa: E402
import bench_store  # noqa: E402

from tests.support.load import run_load  # noqa: E402
from tests.support.server import ServerProcess  # noqa: E402


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


async def store_section(quick: bool, root: Path) -> str:
    argv = (
        ["--turns", "300", "--warmup", "20", "--large-history", "20000", "--history-reps", "100"]
        if quick
        else ["--turns", "2000", "--large-history", "100000", "--history-reps", "500"]
    )
    argv += ["--agents", "500" if quick else "10000", "--synchronous", "FULL"]
    args = bench_store.parse_args(argv)
    await asyncio.to_thread(root.mkdir, parents=True, exist_ok=True)
    log(f"store: bench_store {' '.join(argv)}")
    table: str = await bench_store.run(args, root)
    return "\n".join(
        [
            "## 1. Store: session-server vs raw sqlite3 vs OpenAI Agents SDK SQLiteSession",
            "",
            "Same turn shape (user message, assistant tool call, tool result, assistant answer;"
            " a read of the last 50 events before each write), same `synchronous` level, WAL."
            " (a) is the storage limit, (c) the peer. (b+m) is (b) with the JSONL mirror on.",
            f"Command: `scripts/bench_store.py {' '.join(argv)}`",
            "",
            table,
        ]
    )


async def rpc_section(quick: bool) -> str:
    calls, warmup, agents = (300, 50, 16) if quick else (2000, 200, 16)
    log(f"rpc: echo and turn.persist, {calls} calls")
    a = await bench_rpc.echo_rate(calls, warmup)
    b, c, stack, local = await bench_rpc.persist_rates(calls, warmup, agents)
    return "\n".join(
        [
            "## 2. RPC: turn.persist over the server vs a bare websockets echo",
            "",
            "Same request text (a 4-message `turn.persist`), one event loop, 127.0.0.1,"
            " `synchronous=NORMAL`.",
            f"Command: `scripts/bench_rpc.py --calls {calls} --warmup {warmup} --agents {agents}`",
            "",
            "| measure | calls/s | ratio | baseline |",
            "|---|---:|---:|---|",
            f"| (a) websockets echo, sequential | {a:,.0f} | 1.00 | (a) |",
            f"| (b) turn.persist, sequential | {b:,.0f} | {b / a:.2f} | (a), target >= 0.60 |",
            f"| (c) turn.persist, {agents} connections on {agents} agents | {c:,.0f}"
            f" | {c / b:.2f} | (b) |",
            f"| RPC stack only (framing + validation, no actor) | {stack:,.0f} | {stack / a:.2f}"
            " | (a) |",
            f"| local actor call (no RPC) | {local:,.0f} | {local / b:.2f} | (b) |",
        ]
    )


def compaction_section(quick: bool) -> str:
    turns = 100 if quick else 200
    sizes = [1_000, 20_000] if quick else [1_000, 100_000]
    log(f"compaction: {turns} turns, sizes {sizes}")
    # strategy_table runs its own event loop (asyncio.run): call this from a thread.
    rows = bench_compaction.strategy_table(turns)
    base = rows[0][2]
    lines = [
        "## 3. Compaction: tokens saved and build time",
        "",
        f"A {turns}-turn tool-heavy session; tokens of the built context (tiktoken) per"
        " strategy, against no compaction measured in the same run.",
        f"Command: `scripts/bench_compaction.py --turns {turns} --sizes"
        f" {' '.join(map(str, sizes))}`",
        "",
        "| strategy | messages | tokens | vs none | saved |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, msgs, toks in rows:
        lines.append(f"| {label} | {msgs} | {toks:,} | {toks / base:.3f} | {1 - toks / base:.1%} |")
    timings = bench_compaction.timing_table(sizes)
    lines += [
        "",
        "| pure build/plan (no I/O) | events | ms | us/event | vs smallest size |",
        "|---|---:|---:|---:|---:|",
    ]
    first: dict[str, float] = {}
    for label, n, seconds in timings:
        first.setdefault(label, seconds)
        lines.append(
            f"| {label} | {n:,} | {seconds * 1000:.2f} | {seconds * 1e6 / max(n, 1):.2f}"
            f" | {seconds / first[label]:.2f}x |"
        )
    return "\n".join(lines)


async def load_section(quick: bool, root: Path) -> str:
    duration = 3.0 if quick else 10.0
    log(f"load: 64 connections, 16 agents, {duration:.0f} s")
    server = ServerProcess(root / "load")
    await asyncio.to_thread(server.start)
    try:
        assert server.proc is not None
        report = await run_load(server.url, server.proc.pid, duration=duration)
        server.terminate()
    finally:
        server.kill()
    return "\n".join(
        [
            "## 4. Load: 64 connections over 16 agents (server subprocess, synchronous=FULL)",
            "",
            "Two sessions per agent, each written by two connections at once, 4-message turns"
            " back to back. The same phase runs in the test suite (`tests/faults/test_load.py`,"
            " which checks seqs and turn integrity and writes `build/load_report.json`).",
            "",
            "| measure | value |",
            "|---|---:|",
            f"| duration | {report.duration_s:.1f} s |",
            f"| turns acknowledged | {report.turns:,} ({report.turns_per_s:,.0f}/s) |",
            f"| errors | {len(report.errors)} |",
            f"| turn.persist p50 | {report.p50_ms:.1f} ms |",
            f"| turn.persist p99 | {report.p99_ms:.1f} ms |",
            f"| server RSS start / end | {report.rss_start_kib / 1024:.1f} /"
            f" {report.rss_end_kib / 1024:.1f} MiB |",
        ]
    )


async def run(quick: bool, root: Path) -> str:
    sections = [
        await store_section(quick, root / "store"),
        await rpc_section(quick),
        await asyncio.to_thread(compaction_section, quick),
        await load_section(quick, root),
    ]
    now = datetime.datetime.now(datetime.UTC)
    header = [
        "# Benchmarks",
        "",
        f"Generated by `scripts/bench_all.py{' --quick' if quick else ''}` on"
        f" {now:%Y-%m-%d %H:%M} UTC: {os.cpu_count()} CPU cores, {platform.machine()},"
        f" Linux {platform.release()}, Python {platform.python_version()},"
        f" SQLite {sqlite3.sqlite_version}.",
        "",
        "Every ratio is against a baseline measured in the same run on the same machine;"
        " absolute numbers depend on the disk (fsync cost) and are only comparable within a run.",
    ]
    if quick:
        header += ["", "**Quick run: short measurements, not the reference figures.**"]
    return "\n\n".join(["\n".join(header), *sections]) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument("--quick", action="store_true", help="a short run (not the figures)")
    parser.add_argument("--out", type=Path, default=ROOT / "BENCHMARKS.md")
    parser.add_argument("--dir", type=Path, default=None, help="where the temporary files go")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="bench_all_", dir=args.dir))
    try:
        report = asyncio.run(run(args.quick, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    args.out.write_text(report)
    print(report)
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
