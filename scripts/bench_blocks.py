"""Memory blocks: what they add to a build, and what a revision write costs.

Run: ``.venv/bin/python scripts/bench_blocks.py [--builds N] [--writes N] [--events N]``.

Local API (``AgentActor``), real agent files in a temporary folder, ``synchronous=FULL``:

- build: ``build_working_context`` of a session of ``--events`` events (default 50, the
  store benchmark's window) with 0, 10 and 50 blocks (half the agent's, half the
  session's, each about 200 tokens), ``--builds`` times after one warm-up build; the mean
  and p50/p99 per build, and the p50's change from 0 blocks in percent (the mean of a
  build of tens of microseconds moves with the machine's load);
- the first build after a block write (the block read and the new text's render and
  count): the same figures;
- write: ``set_block`` of a session block, ``--writes`` times (each a new revision,
  one transaction with its fsync), mean and p50/p99.

Wall-clock figures on a shared machine: the load moves them; repeat and compare.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.bench_env import token_mode, use_shared_tiktoken  # noqa: E402

use_shared_tiktoken()

from session_server.events import ContextMessage  # noqa: E402
from session_server.runtime.actor import AgentActor  # noqa: E402
from session_server.runtime.registry import ActorRegistry  # noqa: E402

SID = "bench"
VALUE = "The user prefers concise answers and metric units. " * 20  # about 200 tokens


def _ms(samples: list[float]) -> str:
    samples = sorted(samples)
    p50 = samples[len(samples) // 2]
    p99 = samples[min(len(samples) - 1, int(len(samples) * 0.99))]
    return (
        f"mean {statistics.fmean(samples) * 1e3:.3f} ms, p50 {p50 * 1e3:.3f}, p99 {p99 * 1e3:.3f}"
    )


async def _session(actor: AgentActor, events: int) -> None:
    await actor.create_session(session_id=SID)
    ctx = await actor.build_working_context(SID)
    for n in range(events // 2):
        ctx.add_messages(
            [
                ContextMessage(role="user", content=f"question {n} " * 10),
                ContextMessage(role="assistant", content=f"answer {n} " * 20),
            ]
        )
    await actor.persist_working_context(SID, ctx)


async def _builds(actor: AgentActor, n: int) -> list[float]:
    await actor.build_working_context(SID, system_instructions=["You are helpful."])
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await actor.build_working_context(SID, system_instructions=["You are helpful."])
        out.append(time.perf_counter() - t)
    return out


async def main(builds: int, writes: int, events: int) -> None:
    print(
        f"memory blocks, tokens: {token_mode()}, builds {builds}, writes {writes}, events {events}"
    )
    with tempfile.TemporaryDirectory(prefix="bench_blocks_") as tmp:
        async with ActorRegistry(Path(tmp), idle_timeout=None, synchronous="FULL") as reg:
            actor = await reg.get("bench-agent", create=True)
            await _session(actor, events)
            base: float | None = None
            have = 0
            for count in (0, 10, 50):
                while have < count:
                    session = have % 2 == 1
                    await actor.set_block(
                        f"block-{have:02d}",
                        VALUE,
                        session_id=SID if session else None,
                        description=f"block {have}",
                    )
                    have += 1
                samples = await _builds(actor, builds)
                median = statistics.median(samples)  # the mean moves with the machine's load
                extra = (
                    "" if base is None else f", p50 {(median / base - 1) * 100:+.1f}% vs 0 blocks"
                )
                base = median if base is None else base
                print(f"build with {count:2d} blocks: {_ms(samples)}{extra}")
            after_write = []
            for n in range(min(builds, 200)):
                await actor.set_block("block-01", VALUE + str(n), session_id=SID)
                t = time.perf_counter()
                await actor.build_working_context(SID, system_instructions=["You are helpful."])
                after_write.append(time.perf_counter() - t)
            print(f"first build after a block write (50 blocks): {_ms(after_write)}")
            latencies = []
            for n in range(writes):
                t = time.perf_counter()
                await actor.set_block("written", f"revision {n} " + VALUE, session_id=SID)
                latencies.append(time.perf_counter() - t)
            print(f"revision write (set_block, FULL): {_ms(latencies)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--builds", type=int, default=2000)
    parser.add_argument("--writes", type=int, default=500)
    parser.add_argument("--events", type=int, default=50)
    args = parser.parse_args()
    asyncio.run(main(args.builds, args.writes, args.events))
