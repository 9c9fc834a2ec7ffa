#!/usr/bin/env python
"""Benchmark report: every figure against its baseline measured in the same run.

Runs, in one process (the load phase against a server subprocess):

1. Store (``scripts/bench_store.py``, FULL and NORMAL): per-turn cost of the store vs raw
   ``sqlite3`` with the same schema (the storage limit) vs the OpenAI Agents SDK
   ``SQLiteSession`` (same turn shape, same ``synchronous`` level, WAL everywhere); the
   JSONL mirror overhead (b+m); 32 concurrent writers on one agent vs ``SQLiteSession``
   under the same concurrency and vs our sequential rate; 1, 16 and 256 agents (turns/s,
   activation, open files, RSS); ``build_working_context`` at 1k and 100k events of
   history; N agents touched through one registry (open files, RSS, cold activation);
   the CPU ceiling: our 32 writers at ``synchronous=OFF`` (no flush) next to FULL.
2. Flush latency (``scripts/bench_store.py --flush-delay-ms 1 4`` in a subprocess):
   sequential FULL (a)/(b)/(c) and 32 writers (ours, ``SQLiteSession``, our sequential)
   with every ``fsync``/``fdatasync`` slowed by 1 ms and by 4 ms through an LD_PRELOAD
   shim (``scripts/flush_delay.c``, built with gcc; the section says so when it is not).
3. RPC (``scripts/bench_rpc.py``, NORMAL and FULL): sequential ``turn.persist`` vs its
   bound (a bare ``websockets`` echo round trip of the same request text plus a raw
   sqlite3 commit of the turn), with the client in another process against the echo,
   the minimal server (``scripts/minimal_server.py``) and ours with their CPU per call,
   pipelined calls, 32 connections on one agent, 16 on 16.
4. Compaction (``scripts/bench_compaction.py``): tokens of the built context per strategy
   vs no compaction, and the pure build/plan time at 1k/100k events.
5. Load (``tests/support/load.py``): 64 connections over 16 agents against
   ``session-server serve`` (FULL). Closed loop (each client sends when answered) for a
   bounded time: the saturation throughput, ``turn.persist`` p50/p99, the throughput
   against the sequential limit (raw FULL commits/s from section 3), Little's law (p99
   <= 20 ms with 64 clients back to back needs > 3,200 turns/s), RSS; then open loop at
   25%, 50% and 75% of that throughput (8 s each): offered vs achieved, p50/p99 from the
   scheduled times, errors, the 20 ms target met or not.

Writes ``BENCHMARKS.md`` (``--out``) with the machine's core count and the date, and, when
that is the project's own ``BENCHMARKS.md``, the README's five-row table from it
(``scripts/bench_summary.py``).
``--quick`` is a short run (fewer turns, smaller histories, 500 agents, 3 s per load run) for
checking the script, not for the figures.

Run: ``.venv/bin/python scripts/bench_all.py [--quick] [--out BENCHMARKS.md]``
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import re
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from tests.support.bench_env import (  # noqa: E402
    server_token_mode,
    token_mode,
    use_shared_tiktoken,
)

use_shared_tiktoken()  # before anything counts a token; the server subprocess inherits it

import bench_compaction  # noqa: E402
import bench_rpc  # noqa: E402
import bench_store  # noqa: E402
import bench_summary  # noqa: E402

from tests.support.load import LoadReport, run_load  # noqa: E402
from tests.support.server import ServerProcess  # noqa: E402


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


async def store_section(quick: bool, root: Path) -> str:
    quick_argv = "--turns 300 --warmup 20 --large-history 20000 --history-reps 100"
    quick_argv += " --concurrent-turns 20 --agent-turns 4 --agents 500"
    full_argv = "--turns 2000 --large-history 100000 --history-reps 500"
    full_argv += " --concurrent-turns 50 --agent-turns 10 --agents 10000"
    argv = (quick_argv if quick else full_argv).split()
    argv += ["--synchronous", "FULL", "NORMAL"]
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
            " (a) is the storage limit, (c) the peer. (b+m) is (b) with the JSONL mirror on."
            " Concurrent writers on one agent share commits (group commit).",
            f"Command: `scripts/bench_store.py {' '.join(argv)}`",
            "",
            table,
        ]
    )


async def flush_section(quick: bool, root: Path) -> str:
    """Sequential FULL and 32 writers with every flush slowed to a common disk's cost:
    ``bench_store.py --flush-delay-ms 1 4`` in a subprocess (it runs one child per delay
    under the LD_PRELOAD shim, or says why it skipped: no gcc)."""
    argv = ["--turns", "100", "--warmup", "10"] if quick else ["--turns", "300", "--warmup", "20"]
    argv += ["--rounds", "2", "--writers", "32", "--concurrent-turns", "10" if quick else "20"]
    argv += ["--flush-delay-ms", "1", "4"]
    log(f"flush latency: bench_store {' '.join(argv)}")
    await asyncio.to_thread(root.mkdir, parents=True, exist_ok=True)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(ROOT / "scripts" / "bench_store.py"),
        *argv,
        "--dir",
        str(root),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"bench_store --flush-delay-ms exited {proc.returncode}")
    return "\n".join(
        [
            "## 2. Group commit where a flush costs what it costs on common disks",
            "",
            "This VM's flush is nearly free (section 3: a raw FULL commit of a turn is a few"
            " tenths of a ms), so group commit saves little here (section 1's ceiling row: our"
            " 32 writers with no flush at all, synchronous=OFF, next to FULL). Here every `fsync`/`fdatasync` of the benchmark process calls"
            " the real one and then sleeps 1 ms or 4 ms (an LD_PRELOAD shim,"
            " `scripts/flush_delay.c`, built with gcc at run time): raw sqlite3, ours and"
            " `SQLiteSession` pay the same through libc, no library is patched, and the shim"
            " is checked active before each run (every raw FULL commit takes at least the"
            " delay). Same turn shape and targets as section 1; no JSONL mirror.",
            f"Command: `scripts/bench_store.py {' '.join(argv)}`",
            "",
            out.decode().strip(),
        ]
    )


async def rpc_section(quick: bool) -> tuple[str, float]:
    """The RPC section, and the raw FULL commit rate (the load section's sequential limit)."""
    calls, warmup = (300, 50) if quick else (2000, 200)
    lines = [
        "## 3. RPC: turn.persist over the server vs its bound",
        "",
        "Same request text (a 4-message `turn.persist`), server and client in one process,"
        " 127.0.0.1. The bound of a sequential call is one bare `websockets` echo round trip"
        " plus one raw sqlite3 commit of the turn at the same synchronous level. The `-x`"
        " rows have the client in another process; (m-x) is `scripts/minimal_server.py`, the"
        " least a `turn.persist` server does (decode, validate, count, one worker-thread"
        " commit), the limit measured in this stack; (b-xr-m) and (b-xr-mk) are ours"
        " without the JSONL mirror, and also without idempotency keys in the requests (what"
        " those two parts of the contract cost); the second table is the server process's"
        " CPU time per call meanwhile.",
    ]
    full_commit = 0.0
    for sync in ("NORMAL", "FULL"):
        argv = ["--calls", str(calls), "--warmup", str(warmup), "--synchronous", sync]
        log(f"rpc: bench_rpc {' '.join(argv)}")
        args = bench_rpc.parse_args(argv)
        report = await bench_rpc.measure(args)
        if sync == "FULL":
            full_commit = report.raw_commit
        lines += [
            "",
            f"### synchronous={sync}, loop={report.loop}",
            f"Command: `scripts/bench_rpc.py {' '.join(argv)}`",
            "",
            *report.table(args),
            "",
            *report.cpu_table(),
        ]
    return "\n".join(lines), full_commit


def compaction_section(quick: bool) -> str:
    turns = 100 if quick else 200
    sizes = [1_000, 20_000] if quick else [1_000, 100_000]
    log(f"compaction: {turns} turns, sizes {sizes}")
    # strategy_table runs its own event loop (asyncio.run): call this from a thread.
    rows = bench_compaction.strategy_table(turns)
    base = rows[0][2]
    lines = [
        "## 4. Compaction: tokens saved and build time",
        "",
        f"A {turns}-turn tool-heavy session; tokens of the built context ({token_mode()}) per"
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


OPEN_LOOP_SHARES = (0.25, 0.50, 0.75)
LOAD_CONNECTIONS = 64
P99_TARGET_MS = 20.0


async def load_section(quick: bool, root: Path, limit: float) -> str:
    """Closed loop (saturation), then open loop at shares of the saturation rate, all
    against one server subprocess (each run on its own sessions)."""
    closed_s, open_s = (3.0, 3.0) if quick else (10.0, 8.0)
    log(f"load: {LOAD_CONNECTIONS} connections, 16 agents, closed loop {closed_s:.0f} s")
    server = ServerProcess(root / "load")
    await asyncio.to_thread(server.start)
    opens: list[tuple[float, LoadReport]] = []
    try:
        closed = await run_load(server.url, server.pid, duration=closed_s, tag="closed")
        for share in OPEN_LOOP_SHARES:
            rate = share * closed.turns_per_s
            log(f"load: open loop, {rate:,.0f} turns/s offered, {open_s:.0f} s")
            tag = f"open-{round(share * 100)}"
            opens.append(
                (share, await run_load(server.url, server.pid, duration=open_s, tag=tag, rate=rate))
            )
        server.terminate()
    finally:
        server.kill()

    def verdict(p99: float) -> str:
        return "met" if p99 <= P99_TARGET_MS else "**not met**"

    little_ms = 1000 * LOAD_CONNECTIONS / closed.turns_per_s
    needed = LOAD_CONNECTIONS / (P99_TARGET_MS / 1000)
    lines = [
        "## 5. Load: 64 connections over 16 agents (server subprocess, synchronous=FULL)",
        "",
        "Two sessions per agent, each written by two connections at once, 4-message turns."
        " The same phase runs in the test suite (`tests/faults/test_load.py`, which checks"
        " seqs and turn integrity, closed and open loop, and writes `build/load_report.json`).",
        "",
        f"### Closed loop: every client sends its next turn when the last is answered"
        f" ({closed_s:.0f} s)",
        "",
        "The throughput here is the server's saturation rate; by Little's law the mean"
        " latency is then the number of clients over the throughput, whatever the server does.",
        "",
        "| measure | value |",
        "|---|---:|",
        f"| duration | {closed.duration_s:.1f} s |",
        f"| turns acknowledged | {closed.turns:,} ({closed.turns_per_s:,.0f}/s) |",
        f"| throughput / sequential limit ({limit:,.0f} raw sqlite3 FULL commits/s,"
        f" section 3) | {closed.turns_per_s / limit:.2f}x |",
        f"| errors | {len(closed.errors)} |",
        f"| turn.persist p50 | {closed.p50_ms:.1f} ms |",
        f"| turn.persist p99 (target <= {P99_TARGET_MS:.0f} ms) | {closed.p99_ms:.1f} ms"
        f" {verdict(closed.p99_ms)} |",
        f"| Little's law: {LOAD_CONNECTIONS} clients / {closed.turns_per_s:,.0f} turns/s"
        f" (measured mean {statistics.mean(closed.latencies_ms):.1f} ms) | {little_ms:.1f} ms |",
        f"| closed-loop p99 <= {P99_TARGET_MS:.0f} ms needs a mean under"
        f" {P99_TARGET_MS:.0f} ms: more than {LOAD_CONNECTIONS} / {P99_TARGET_MS / 1000:.3f} s"
        f" | {needed:,.0f} turns/s |",
        f"| server RSS start / end | {closed.rss_start_kib / 1024:.1f} /"
        f" {opens[-1][1].rss_end_kib / 1024:.1f} MiB (after the open-loop runs) |",
        f"| server token counts | {server_token_mode(server.stderr_text)} |",
        "",
        f"### Open loop: a fixed offered rate ({open_s:.0f} s each)",
        "",
        f"The offered rate is spread over the {LOAD_CONNECTIONS} connections, each sending on"
        " its own schedule (evenly spaced, random phase); a turn whose slot comes while its"
        " connection's previous turn is in flight waits, and its latency counts from its"
        " scheduled time (no coordinated omission). Achieved = turns acknowledged over the"
        " run's wall time (the schedule's end plus the drain); unsent = turns still waiting"
        " 5 s after the schedule's end.",
        "",
        "| offered turns/s (share of the closed-loop rate) | achieved turns/s | p50 ms"
        f" | p99 ms | errors | unsent | p99 <= {P99_TARGET_MS:.0f} ms |",
        "|---|---:|---:|---:|---:|---:|:---:|",
    ]
    for share, r in opens:
        lines.append(
            f"| {r.offered_per_s or 0:,.0f} ({share:.0%}) | {r.turns_per_s:,.0f}"
            f" | {r.p50_ms:.1f} | {r.p99_ms:.1f} | {len(r.errors)} | {r.unsent}"
            f" | {verdict(r.p99_ms)} |"
        )
    return "\n".join(lines)


async def run(quick: bool, root: Path) -> str:
    rpc, full_commit = await rpc_section(quick)
    sections = [
        await store_section(quick, root / "store"),
        await flush_section(quick, root / "flush"),
        rpc,
        await asyncio.to_thread(compaction_section, quick),
        await load_section(quick, root, full_commit),
    ]
    now = datetime.datetime.now(datetime.UTC)
    loop = type(asyncio.get_running_loop()).__module__.split(".")[0]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
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
        "",
        f"Event loop of the in-process sections: {loop} (the server's default when installed;"
        f" `--loop`). Token counts: {token_mode()} (`TIKTOKEN_CACHE_DIR`"
        f"={os.environ.get('TIKTOKEN_CACHE_DIR', 'unset')}). Load average at the end of the"
        f" run (1, 5, 15 min): {load}.",
    ]
    if quick:
        header += ["", "**Quick run: short measurements, not the reference figures.**"]
    return "\n\n".join(["\n".join(header), *sections]) + "\n"


_KEPT = re.compile(r"<!-- ([\w-]+):start -->.*?<!-- \1:end -->", re.DOTALL)


def kept_sections(path: Path) -> str:
    """Sections other scripts keep in the report between ``<!-- NAME:start -->`` and
    ``<!-- NAME:end -->`` (e.g. ``scripts/bench_hardening.py``): carried over as they are."""
    if not path.exists():
        return ""
    blocks = [m.group(0) for m in _KEPT.finditer(path.read_text())]
    return "".join(f"\n{block}\n" for block in blocks)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    parser.add_argument("--quick", action="store_true", help="a short run (not the figures)")
    parser.add_argument("--out", type=Path, default=ROOT / "BENCHMARKS.md")
    parser.add_argument("--dir", type=Path, default=None, help="where the temporary files go")
    parser.add_argument(
        "--loop",
        choices=["auto", "asyncio", "uvloop"],
        default="auto",
        help="event loop of the in-process sections: auto (uvloop when installed, as the server)",
    )
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="bench_all_", dir=args.dir))
    try:
        report = bench_rpc.run_with_loop(args.loop, run(args.quick, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    args.out.write_text(report + kept_sections(args.out))
    print(report)
    log(f"wrote {args.out}")
    if args.out.resolve() == (ROOT / "BENCHMARKS.md").resolve():
        readme = ROOT / "README.md"
        readme.write_text(bench_summary.with_summary(readme.read_text(), report))
        log(f"wrote the benchmark table of {readme}")


if __name__ == "__main__":
    main()
