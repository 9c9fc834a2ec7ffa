#!/usr/bin/env python3
"""Activation cost against history length (issue 13, "activation cost does not grow with
history length").

For each size (default 1,000 and 200,000 events in one session) the script writes the
session through ``ActorRegistry`` and closes it cleanly, then measures, each in a fresh
process (so imports and caches do not count):

- ``clean``: open the agent and append one event (the first write after a restart), the
  mirror written: wall time and RSS growth (peak minus the RSS before opening);
- ``crash``: the same after a crash (the stored mirror cursor set behind, as a SIGKILL
  leaves it): the first write plus the streamed mirror repair it triggers.

    scripts/bench_activation.py                 # 1k and 200k
    scripts/bench_activation.py --sizes 1000 20000

Imports and the token encoding are loaded before the clock starts (they cost the same
whatever the history). ``PYTHONPATH=<another checkout>`` measures that checkout instead (the script only uses
``ActorRegistry``, ``append_events`` and ``mirror.drain``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

AGENT = "bench-activation"
SESSION = "s"
BATCH = 2000


def _status(key: str) -> int:
    """A ``/proc/self/status`` figure in KiB (VmRSS, VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


async def build(memory: Path, events: int) -> None:
    from session_server.runtime.registry import ActorRegistry
    from session_server.values.events import SessionEvent

    async with ActorRegistry(memory, idle_timeout=None, synchronous="NORMAL") as reg:
        actor = await reg.get(AGENT)
        await actor.create_session(session_id=SESSION)
        for start in range(0, events, BATCH):
            batch = [
                SessionEvent(
                    action="user_message" if i % 2 == 0 else "agent_message",
                    content=f"message {i}: " + "lorem ipsum dolor sit amet " * 2,
                )
                for i in range(start, min(events, start + BATCH))
            ]
            await actor.append_events(SESSION, batch)


def measure(memory: Path) -> dict[str, Any]:
    import session_server.runtime.registry  # noqa: F401 - imports are not activation
    from session_server.values.tokens import count_text

    count_text("warm")  # nor is loading the token encoding (about 70 MiB, once a process)
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak RSS (VmHWM)
    before = _status("VmRSS")
    result = asyncio.run(first_write(memory))
    result["rss_growth_mib"] = round((result.pop("peak_kib") - before) / 1024, 1)
    return result


async def first_write(memory: Path) -> dict[str, Any]:
    from session_server.runtime.registry import ActorRegistry
    from session_server.values.events import SessionEvent

    started = time.perf_counter()
    async with ActorRegistry(memory, idle_timeout=None, synchronous="NORMAL") as reg:
        actor = await reg.get(AGENT)
        await actor.append_events(SESSION, [SessionEvent(content="one more")])
        answered = time.perf_counter() - started
        await actor.mirror.drain()  # the activation's mirror work, repair included
        settled = time.perf_counter() - started
        peak = _status("VmHWM")
    return {
        "first_write_ms": round(answered * 1000, 1),
        "mirror_settled_ms": round(settled * 1000, 1),
        "peak_kib": peak,
    }


def run_measure(memory: Path) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--measure", str(memory)],
        check=True,
        capture_output=True,
        text=True,
        env=os.environ,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def crash(memory: Path) -> None:
    """As a SIGKILL leaves the file: the stored mirror cursor behind the last seq."""
    with sqlite3.connect(memory / "agents" / AGENT / "agent.sqlite") as conn:
        conn.execute("UPDATE sessions SET mirror_seq = 0")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 200_000])
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure is not None:
        print(json.dumps(measure(args.measure)))
        return
    rows = []
    for size in args.sizes:
        with tempfile.TemporaryDirectory() as tmp:
            memory = Path(tmp) / "memory"
            t0 = time.perf_counter()
            asyncio.run(build(memory, size))
            built = time.perf_counter() - t0
            clean = run_measure(memory)
            crash(memory)
            after_crash = run_measure(memory)
            rows.append(
                {"events": size, "build_s": round(built, 1), "clean": clean, "crash": after_crash}
            )
            print(json.dumps(rows[-1]), flush=True)
    print()
    print("| events | case | first write (ms) | mirror settled (ms) | RSS growth (MiB) |")
    print("|---:|---|---:|---:|---:|")
    for row in rows:
        for case in ("clean", "crash"):
            m = row[case]
            print(
                f"| {row['events']:,} | {case} | {m['first_write_ms']} | "
                f"{m['mirror_settled_ms']} | {m['rss_growth_mib']} |"
            )


if __name__ == "__main__":
    main()
