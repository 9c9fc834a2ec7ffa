#!/usr/bin/env python
"""The RPC target against its limit, over many alternating rounds.

``bench_rpc`` gives one run of every row; on a VM whose speed drifts by tens of percent
within minutes, one run cannot say whether a fraction of the bound is over 0.50 or not.
This script repeats only the rows the RPC target depends on, ``--rounds`` times in
alternation, each round with its own bound, all with the client in another process:

(a-x) the bare ``websockets`` echo; (r) a raw ``sqlite3`` commit of the turn; bound-x is
``1 / (1/(a-x) + 1/r)``; (m-xkm) the least server that keeps a ``turn.persist``'s whole
contract (``minimal_server.py`` with the idempotency key, the tool call and the JSONL
mirror); (b-xr) session-server, with the same bare client.

It prints each round, then per row the least, median and most fraction of bound-x and in
how many rounds it reached the target (0.50), and (b-xr)/(m-xkm): how close our server
is to the limit of the contract in this stack. The two servers swap places every round
(a slow drift would otherwise favour the one measured first). Unlike ``bench_rpc``, the
level is FULL unless ``--synchronous`` says otherwise: FULL is the level where the
contract's limit is near the target.

Run: ``.venv/bin/python scripts/bench_rpc_limit.py [--rounds 8] [--synchronous FULL]``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_rpc

from tests.support.bench_env import token_mode

TARGET = 0.50


@dataclass(frozen=True)
class Round:
    """One round: calls/s of each row, measured one after the other."""

    echo: float
    raw: float
    limit: bench_rpc.Apart  # (m-xkm)
    ours: bench_rpc.Apart  # (b-xr)

    @property
    def bound(self) -> float:
        return 1 / (1 / self.echo + 1 / self.raw)


async def one_round(args: argparse.Namespace, ours_first: bool) -> Round:
    echo = await bench_rpc.echo_apart_rate(args)
    with tempfile.TemporaryDirectory() as tmp:
        raw = await asyncio.to_thread(
            bench_rpc.raw_commit_rate,
            Path(tmp) / "raw.sqlite",
            args.synchronous,
            args.calls,
            args.warmup,
        )
    if ours_first:
        ours = await bench_rpc.ours_apart(args, mirror=True, keyed=True)
        limit = await bench_rpc.contract_apart(args, contract=True, mirror=True)
    else:
        limit = await bench_rpc.contract_apart(args, contract=True, mirror=True)
        ours = await bench_rpc.ours_apart(args, mirror=True, keyed=True)
    return Round(echo.rate, raw, limit, ours)


def spread(values: Sequence[float]) -> str:
    """``least / median / most`` of ``values``, two decimals."""
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


def summary(rounds: Sequence[Round]) -> list[str]:
    """The Markdown table of ``rounds``: fractions of bound-x, and ours against the limit."""
    limit = [r.limit.rate / r.bound for r in rounds]
    ours = [r.ours.rate / r.bound for r in rounds]
    n = len(rounds)

    def reached(values: Sequence[float]) -> str:
        return f"{sum(v >= TARGET for v in values)} of {n}"

    return [
        "| row | of bound-x: least / median / most | rounds at 0.50 or more |",
        "|---|---:|---:|",
        f"| (m-xkm) the whole contract at the least | {spread(limit)} | {reached(limit)} |",
        f"| (b-xr) session-server | {spread(ours)} | {reached(ours)} |",
        f"| (b-xr) / (m-xkm) | {spread([o / m for o, m in zip(ours, limit, strict=True)])} | |",
    ]


def round_line(i: int, r: Round) -> str:
    def cpu(a: bench_rpc.Apart) -> str:
        return "" if a.loop_cpu_us is None else f", loop {a.loop_cpu_us:.0f} us/call"

    return (
        f"{time.strftime('%H:%M:%S')} round {i + 1}: echo {r.echo:,.0f}, raw {r.raw:,.0f},"
        f" bound-x {r.bound:,.0f} calls/s | (m-xkm) {r.limit.rate:,.0f} = {r.limit.rate / r.bound:.2f}"
        f"{cpu(r.limit)} | (b-xr) {r.ours.rate:,.0f} = {r.ours.rate / r.bound:.2f}{cpu(r.ours)}"
    )


async def run(args: argparse.Namespace) -> list[Round]:
    rounds: list[Round] = []
    for i in range(args.rounds):
        rounds.append(await one_round(args, ours_first=i % 2 == 1))
        print(round_line(i, rounds[-1]), flush=True)
    return rounds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--calls", type=int, default=2000, help="calls per measurement")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--synchronous", choices=["FULL", "NORMAL"], default="FULL")
    parser.add_argument("--loop", choices=["auto", "asyncio", "uvloop"], default="auto")
    args = parser.parse_args(argv)
    print(
        f"RPC target against its limit: synchronous={args.synchronous}, {args.rounds}"
        f" alternating rounds of {args.calls} calls, token counts: {token_mode()}",
        flush=True,
    )
    rounds: list[Round] = bench_rpc.run_with_loop(args.loop, run(args))
    print()
    print("\n".join(summary(rounds)))


if __name__ == "__main__":
    main()
