#!/usr/bin/env python3
"""What a client sees of a server restart (issue 33, finding 7).

A ``session-server serve`` subprocess on a fixed port serves one ``SessionClient`` that
persists turns in a loop (``build_context`` then ``persist_turn``). Each round stops the
server (SIGTERM or SIGKILL), starts it again on the same port and lets the loop go on.
Per round it reports:

- ``down``: from the signal to the new server's printed address (the restart itself);
- ``outage``: the longest wait between two answered calls of the loop (what the agent
  sees);
- ``lag``: ``outage - down``, the part of the outage that is the client's own (its
  backoff after the server is ready again): the baseline is the restart measured in the
  same round;
- ``failed``: calls that raised (0 expected), and whether the stored seqs run 1..4n with
  every turn once.

    scripts/bench_client_restart.py                  # 3 rounds each of SIGTERM, SIGKILL
    scripts/bench_client_restart.py --rounds 5 --budget 30
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

AGENT = "bench-restart"


@dataclass(frozen=True)
class Round:
    sig: str
    down: float
    outage: float
    failed: int
    turns: int
    seqs_ok: bool

    @property
    def lag(self) -> float:
        return max(0.0, self.outage - self.down)


def longest_wait(answers: list[float]) -> float:
    """The longest interval between consecutive answer times (seconds)."""
    return max((b - a for a, b in itertools.pairwise(answers)), default=0.0)


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


async def one_round(memory: Path, sig: int, budget: float) -> Round:
    from session_server.client import SessionClient
    from tests.support.restartable_process import RestartableProcess
    from tests.support.server import turn_messages

    server = RestartableProcess(memory)
    await server.start()
    answers: list[float] = []
    failed = 0
    try:
        async with SessionClient(server.url, AGENT, reconnect_budget=budget) as client:
            sid = await client.create_session()
            restarted, warmed = asyncio.Event(), asyncio.Event()
            turns = 0

            async def loop() -> None:
                nonlocal turns, failed
                after = 0
                while after < 20:
                    try:
                        ctx = await client.build_context(sid)
                        await client.persist_turn(
                            sid, turn_messages(turns + 1), base_seq=ctx.base_seq
                        )
                    except Exception as exc:  # counted: none expected
                        failed += 1
                        print(f"  call failed: {exc!r}", file=sys.stderr)
                        continue
                    turns += 1
                    answers.append(time.perf_counter())
                    after += restarted.is_set()
                    if len(answers) >= 20:  # some calls before the signal
                        warmed.set()

            running = asyncio.create_task(loop())
            await warmed.wait()
            began = time.perf_counter()
            await server.restart(sig)
            down = time.perf_counter() - began
            restarted.set()
            await running
            events = await client.load_events(sid, limit=None, tail=False)
        seqs_ok = [e.seq for e in events] == list(range(1, 4 * turns + 1))
    finally:
        await server.stop(signal.SIGKILL)
    return Round(signal.Signals(sig).name, down, longest_wait(answers), failed, turns, seqs_ok)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--budget", type=float, default=30.0, help="reconnect_budget (s)")
    args = parser.parse_args()
    rows: list[Round] = []
    with tempfile.TemporaryDirectory() as tmp:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for n in range(args.rounds):
                rows.append(await one_round(Path(tmp) / f"{sig}-{n}", sig, args.budget))
                r = rows[-1]
                print(
                    f"{r.sig:8} down {r.down:6.2f} s  outage {r.outage:6.2f} s  "
                    f"lag {r.lag:5.2f} s  failed {r.failed}  turns {r.turns}  "
                    f"seqs {'ok' if r.seqs_ok else 'WRONG'}"
                )
    for name in ("SIGTERM", "SIGKILL"):
        mine = [r for r in rows if r.sig == name]
        print(
            f"{name}: median down {median([r.down for r in mine]):.2f} s, median lag "
            f"{median([r.lag for r in mine]):.2f} s (client's share of the outage), "
            f"failed calls {sum(r.failed for r in mine)}, "
            f"seqs ok {sum(r.seqs_ok for r in mine)}/{len(mine)}"
        )


if __name__ == "__main__":
    asyncio.run(main())
