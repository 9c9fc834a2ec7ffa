"""Instructions per turn under callgrind: a figure a shared machine does not disturb.

Run: ``.venv/bin/python scripts/bench_instructions.py [--turns N] [--synchronous LEVEL]
[--writers W]``. Wall-clock figures move with the machine's load (the shared 2-core
machine of this project ran at load 3-9); the instruction count of a piece of work does
not. Each system runs ``N`` and ``4 N`` sequential turns of the store benchmark's shape
(``scripts/bench_store.py``: build a 50-event window, persist 4 messages, idempotency
key) under ``valgrind --tool=callgrind --separate-threads=yes``; the difference divided
by ``3 N`` is the cost of one turn without start-up. Reported: (a) raw ``sqlite3``,
(b) session-server (with its event-loop thread apart from the worker threads: the loop
thread is what one process serves every connection with), (c) the Agents SDK's
``SQLiteSession``. ``--writers W`` runs (b) as W concurrent writers on one agent.
``--systems rpc minimal`` (not run by default) measure the server process of a sequential
``turn.persist`` over RPC instead, called by ``bench_rpc``'s bare client in another process
(not under valgrind): (d) session-server (mirror off, as (b)) and (e) ``minimal_server.py``,
the least such a server does; their main thread is the event loop, the rest the workers.

Needs ``valgrind`` on the PATH. Slow: about a minute per system at the default size.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.bench_env import token_mode, use_shared_tiktoken  # noqa: E402

# Set before the workload subprocesses start: they inherit it.
use_shared_tiktoken()

SYSTEMS = ("raw", "ours", "sdk", "rpc", "minimal")
DEFAULT_SYSTEMS = ("raw", "ours", "sdk")


def _workload(system: str, synchronous: str, turns: int, writers: int) -> None:
    """Run ``turns`` turns of ``system`` (in the process valgrind watches): the loops of
    ``bench_store`` without their final checks (a read of everything, linear in N)."""
    sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]
    import bench_store

    from session_server.runtime.registry import ActorRegistry

    root = Path(tempfile.mkdtemp(prefix="bench_instructions_"))
    if system == "raw":
        bench_store.bench_raw(root / "raw.sqlite", synchronous, 0, turns)
        return

    async def sdk() -> None:
        session = bench_store.sdk_session_class(synchronous)("sdk", db_path=root / "sdk.sqlite")
        try:
            for n in range(1, turns + 1):
                await session.get_items(limit=bench_store.WINDOW)
                await session.add_items(bench_store.turn_items(n))
        finally:
            session.close()

    async def ours() -> None:
        async with ActorRegistry(root, synchronous=synchronous, mirror=False) as reg:  # type: ignore[arg-type]
            actor = await reg.get("agent")
            sessions = [await actor.create_session() for _ in range(writers)]

            async def write(sid: str) -> None:
                for n in range(1, turns + 1):
                    ctx = await actor.build_working_context(
                        sid, system_instructions=bench_store.SYSTEM, limit=bench_store.WINDOW
                    )
                    ctx.add_messages(bench_store.turn_messages(n))
                    await actor.persist_working_context(sid, ctx, idempotency_key=f"t{n}")

            await asyncio.gather(*(write(s) for s in sessions))

    async def served() -> None:
        """The server in this process, called by ``bench_rpc``'s bare client in another
        process (valgrind does not follow it): ``turns`` sequential ``turn.persist``."""
        import bench_rpc
        from minimal_server import minimal_server

        from session_server.client import SessionClient
        from session_server.server import SessionServer

        args = bench_rpc.parse_args(["--calls", str(turns), "--warmup", "0"])
        if system == "minimal":
            async with minimal_server(root / "minimal.sqlite", synchronous) as server:
                await bench_rpc.client_apart(args, "bare", server.url)
            return
        async with (
            ActorRegistry(root, synchronous=synchronous, mirror=False) as reg,  # type: ignore[arg-type]
            SessionServer(reg, port=0) as ours_server,
            SessionClient(ours_server.url, "agent") as client,
        ):
            await client.create_session(session_id="s")
            await bench_rpc.client_apart(args, "bare", f"{ours_server.url}/v1/agents/agent")

    work = {"sdk": sdk, "rpc": served, "minimal": served}.get(system, ours)
    bench_store.run_with_loop("auto", work())


def _count(system: str, synchronous: str, turns: int, writers: int) -> tuple[int, int]:
    """(all threads, main thread) instructions of one run under callgrind."""
    with tempfile.TemporaryDirectory() as out:
        base = Path(out) / "cg.out"
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--separate-threads=yes",
                f"--callgrind-out-file={base}",
                sys.executable,
                __file__,
                "--run",
                system,
                "--synchronous",
                synchronous,
                "--turns",
                str(turns),
                "--writers",
                str(writers),
            ],
            check=True,
            capture_output=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        totals: dict[str, int] = {}
        for f in Path(out).glob("cg.out*"):
            match = re.search(r"^summary: (\d+)", f.read_text(errors="replace"), re.MULTILINE)
            if match:
                totals[f.name] = int(match.group(1))
    main = totals.get("cg.out-01", sum(totals.values()))
    return sum(totals.values()), main


def measure(system: str, synchronous: str, turns: int, writers: int) -> tuple[int, int]:
    """(all threads, main thread) instructions per turn."""
    with ThreadPoolExecutor(2) as pool:
        short = pool.submit(_count, system, synchronous, turns, writers)
        long = pool.submit(_count, system, synchronous, 4 * turns, writers)
        (a_all, a_main), (b_all, b_main) = short.result(), long.result()
    n = 3 * turns * (writers if system == "ours" else 1)
    return (b_all - a_all) // n, (b_main - a_main) // n


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--turns", type=int, default=100, help="N: runs of N and 4 N turns (100)")
    p.add_argument("--synchronous", choices=["FULL", "NORMAL"], default="NORMAL")
    p.add_argument("--writers", type=int, default=1, help="(b) as W writers on one agent")
    p.add_argument(
        "--systems",
        nargs="+",
        choices=SYSTEMS,
        default=list(DEFAULT_SYSTEMS),
        help="rpc: our server over RPC, minimal: scripts/minimal_server.py, each called by"
        " a bare client in another process (the server process's instructions per call)",
    )
    p.add_argument("--run", choices=SYSTEMS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.run:
        _workload(args.run, args.synchronous, args.turns, args.writers)
        return
    rows = {s: measure(s, args.synchronous, args.turns, args.writers) for s in args.systems}
    print(
        f"Instructions per turn under callgrind, synchronous={args.synchronous},"
        f" {args.turns} and {4 * args.turns} turns"
        + (f", (b) with {args.writers} writers on one agent" if args.writers > 1 else "")
        + f"; token counts: {token_mode()}"
    )
    print()
    print("| system | all threads | main (event loop) thread | vs (a) raw sqlite3 |")
    print("|---|---:|---:|---:|")
    raw = rows.get("raw", (0, 0))[0]
    names = {
        "raw": "(a) raw sqlite3",
        "ours": "(b) session-server",
        "sdk": "(c) SQLiteSession",
        "rpc": "(d) session-server over RPC, server process",
        "minimal": "(e) minimal server over RPC, server process",
    }
    for system, (total, main_thread) in rows.items():
        ratio = f"{total / raw:.2f}x" if raw else ""
        print(f"| {names[system]} | {total:,} | {main_thread:,} | {ratio} |")


if __name__ == "__main__":
    main()
