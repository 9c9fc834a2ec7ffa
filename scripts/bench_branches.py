#!/usr/bin/env python3
"""What branches cost (issue 36): fork time and file growth of a session of N events, the
build of a fork 10 levels deep against the same history unforked, and rewind time.

    .venv/bin/python scripts/bench_branches.py [--events 1000 100000] [--forks 5]
        [--fill actor|store] [--phases fork deep rewind]

Through the local API (``AgentActor``) on real files at ``synchronous=FULL``. A session
of N events is N/2 turns (a user message and an answer, about 60 bytes of text each).

``--fill`` says how the sessions are filled:

- ``actor`` (default): appends of ``BATCH`` events through a registry that keeps the
  JSONL mirror, as a server does; every measurement runs with the mirror on.
- ``store``: the fast fill for large N. The same ``AgentActor.append_events`` (so the
  core plans the events: the same ids, seqs, turn numbers and token counts, written by
  the store's own append transaction, recall index and all) in batches of
  ``STORE_BATCH``, through a registry with ``mirror=False``: no mirror file is rendered,
  which is what makes an actor fill of a million events take hours. Every measurement of
  the run then uses ``mirror=False`` too (a registry with the mirror on would first
  re-render the whole unmirrored session in the background). The SQLite rows are those
  an actor fill writes, and a cold build reads SQLite only, so the build figures are the
  same costs. A fork and a rewind answer after their one transaction commits, but with
  the mirror on they also schedule the changed sessions' mirror repair before answering,
  and that repair (a worker thread reading the whole session) then competes with the
  rest of the answer: their ``store`` figures leave that share out. Measure it with
  ``--fill actor --phases fork rewind`` (the renders of a large session are what make
  that run long).

- fork: the median of ``--forks`` forks at the head, how much the agent file (main
  file + WAL, after a checkpoint) grew per fork, in bytes and per parent event, and the
  rows of ``events`` each fork added (zero-copy: none);
- build: a cold ``context.build`` (a fresh registry: nothing cached) of a fork 10 levels
  deep (each level forked at its parent's head, then one turn of its own) against a
  session holding the same events written directly; the median of 9 each, taken in
  turns, and their ratio;
- rewind: a rewind to the middle of the session, keeping the tail as a branch, and one
  with ``erase`` (which also truncates the WAL), each on a fresh fork of the session,
  and a rewind of the session itself (a root) keeping the tail as a branch.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

from session_server import ActorRegistry, AgentActor
from session_server.values.events import SessionEvent

AGENT = "bench"
BATCH = 10_000
STORE_BATCH = 50_000
BUILDS = 9
MIRROR = True
"""Set by ``--fill``: whether every registry of the run keeps the mirror."""


def registry(memory_dir: Path) -> ActorRegistry:
    return ActorRegistry(memory_dir, idle_timeout=None, synchronous="FULL", mirror=MIRROR)


def turn_events(start: int, count: int) -> list[SessionEvent]:
    out = []
    for i in range(start, start + count):
        action = "user_message" if i % 2 == 0 else "agent_message"
        out.append(SessionEvent(action=action, content=f"message {i} " + "lorem ipsum " * 4))  # type: ignore[arg-type]
    return out


async def fill(actor: AgentActor, sid: str, events: int, start: int = 0) -> None:
    batch = BATCH if MIRROR else STORE_BATCH
    started = time.perf_counter()
    for first in range(start, start + events, batch):
        await actor.append_events(sid, turn_events(first, min(batch, start + events - first)))
    if events >= batch:
        print(f"filled {events:,} events in {time.perf_counter() - started:.0f} s", file=sys.stderr)


def event_rows(memory_dir: Path) -> int:
    conn = sqlite3.connect(memory_dir / "agents" / AGENT / "agent.sqlite")
    try:
        return int(conn.execute("SELECT count(*) FROM events").fetchone()[0])
    finally:
        conn.close()


def file_bytes(memory_dir: Path) -> int:
    path = memory_dir / "agents" / AGENT / "agent.sqlite"
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()
    return int((pages - free) * size)


async def bench_fork(memory_dir: Path, events: int, forks: int) -> dict[str, float]:
    async with registry(memory_dir) as reg:
        actor = await reg.get(AGENT)
        sid = await actor.create_session(session_id=f"src-{events}")
        await fill(actor, sid, events)
        times = []
        growth = []
        rows = []
        for _ in range(forks):
            await actor.mirror_settled()  # the previous fork's mirror is not this one's cost
            before, before_rows = file_bytes(memory_dir), event_rows(memory_dir)
            started = time.perf_counter()
            await actor.fork_session(sid)
            times.append(time.perf_counter() - started)
            growth.append(file_bytes(memory_dir) - before)
            rows.append(event_rows(memory_dir) - before_rows)
        await actor.mirror_settled()
    grown = statistics.median(growth)
    return {
        "fork_ms": statistics.median(times) * 1000,
        "growth_bytes": grown,
        "growth_per_event": grown / events,
        "rows": statistics.median(rows),
    }


async def cold_build(memory_dir: Path, sid: str) -> float:
    async with registry(memory_dir) as reg:
        actor = await reg.get(AGENT)
        await actor.get_session(sid)  # activation is not part of the build
        started = time.perf_counter()
        await actor.build_working_context(sid, may_compact=False)
        return time.perf_counter() - started


async def bench_deep_build(memory_dir: Path, events: int, depth: int = 10) -> dict[str, float]:
    async with registry(memory_dir) as reg:
        actor = await reg.get(AGENT)
        base = await actor.create_session(session_id=f"deep-0-{events}")
        flat = await actor.create_session(session_id=f"flat-{events}")
        await fill(actor, base, events)
        await fill(actor, flat, events)
        current = base
        for level in range(1, depth + 1):
            fork = await actor.fork_session(current, new_session_id=f"deep-{level}-{events}")
            current = fork.session_id
            own = events + 2 * (level - 1)
            await fill(actor, current, 2, start=own)
            await fill(actor, flat, 2, start=own)
        await actor.mirror_settled()
    deeps: list[float] = []
    flats: list[float] = []
    for _ in range(BUILDS):  # interleaved, so that a busy moment of the machine hits both
        deeps.append(await cold_build(memory_dir, current))
        flats.append(await cold_build(memory_dir, flat))
    deep, unforked = statistics.median(deeps), statistics.median(flats)
    return {"deep_ms": deep * 1000, "flat_ms": unforked * 1000, "ratio": deep / unforked}


async def bench_rewind(memory_dir: Path, events: int) -> dict[str, float]:
    async with registry(memory_dir) as reg:
        actor = await reg.get(AGENT)
        sid = await actor.create_session(session_id=f"rw-{events}")
        await fill(actor, sid, events)
        out = {}
        for erase in (False, True):
            target = (await actor.fork_session(sid)).session_id
            await actor.mirror_settled()  # the fork's mirror files are not the rewind's cost
            started = time.perf_counter()
            await actor.rewind_session(target, events // 2, erase=erase)
            out["erase_ms" if erase else "branch_ms"] = (time.perf_counter() - started) * 1000
            await actor.mirror_settled()
        started = time.perf_counter()
        await actor.rewind_session(sid, events // 2)
        out["root_ms"] = (time.perf_counter() - started) * 1000
        await actor.mirror_settled()
    return out


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, nargs="+", default=[1000, 100_000])
    parser.add_argument("--forks", type=int, default=5)
    parser.add_argument("--fill", choices=["actor", "store"], default="actor")
    parser.add_argument(
        "--phases",
        nargs="+",
        choices=["fork", "deep", "rewind"],
        default=["fork", "deep", "rewind"],
        help="what to measure (the columns of a phase left out print as '-')",
    )
    args = parser.parse_args()
    global MIRROR
    MIRROR = args.fill == "actor"
    print(f"fill: {args.fill} (mirror {'on' if MIRROR else 'off'})")
    print("| events | fork (median) | file growth per fork | per event | event rows per fork "
          "| 10-deep fork build | unforked build | ratio | rewind of a fork (branch) "
          "| rewind of a fork (erase) | rewind of the root (branch) |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for events in args.events:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            cells = ["-"] * 10
            if "fork" in args.phases:
                fork = await bench_fork(root / "fork", events, args.forks)
                cells[0:4] = [
                    f"{fork['fork_ms']:.1f} ms",
                    f"{fork['growth_bytes']:,.0f} B",
                    f"{fork['growth_per_event']:.4f} B",
                    f"{fork['rows']:.0f}",
                ]
            if "deep" in args.phases:
                deep = await bench_deep_build(root / "deep", events)
                cells[4:7] = [
                    f"{deep['deep_ms']:.1f} ms",
                    f"{deep['flat_ms']:.1f} ms",
                    f"{deep['ratio']:.2f}x",
                ]
            if "rewind" in args.phases:
                rewind = await bench_rewind(root / "rewind", events)
                cells[7:10] = [
                    f"{rewind['branch_ms']:.1f} ms",
                    f"{rewind['erase_ms']:.1f} ms",
                    f"{rewind['root_ms']:.1f} ms",
                ]
        print(f"| {events:,} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
