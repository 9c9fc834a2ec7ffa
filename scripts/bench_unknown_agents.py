#!/usr/bin/env python3
"""``session.list`` on 1,000 unknown agents against a real ``session-server serve``
(issue 13, item 7): the answers, the agent folders made, the server's RSS growth and the
time taken. ``--root`` runs the server of another checkout (with its own ``.venv``), e.g.
an older commit for the "before" figure.

    .venv/bin/python scripts/bench_unknown_agents.py [--root /path/to/checkout]

Each unknown agent gets its own connection (handshake, one ``session.list``, close), four
clients at a time; 100 agents warm the server up before the RSS is read.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import subprocess
import tempfile
import time
from pathlib import Path

from websockets.asyncio.client import connect

ROOT = Path(__file__).resolve().parents[1]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


async def ask_unknown(url: str, start: int, count: int) -> list[str]:
    outcomes = []
    for n in range(start, start + count):
        async with connect(f"{url}/v1/agents/nobody-{n}") as ws:
            await ws.send('{"jsonrpc":"2.0","id":1,"method":"session.list"}')
            answer = json.loads(await ws.recv())
            outcomes.append(str(answer["error"]["code"]) if "error" in answer else "ok")
    return outcomes


async def phase(url: str, pid: int, agents: int) -> tuple[set[str], int, float]:
    """Warm up, then ask ``agents`` unknown agents: (outcomes, RSS growth KiB, seconds)."""
    await asyncio.gather(*(ask_unknown(url, i * 25, 25) for i in range(4)))
    before = rss_kib(pid)
    started = time.perf_counter()
    share = agents // 4
    parts = await asyncio.gather(*(ask_unknown(url, 100 + i * share, share) for i in range(4)))
    seconds = time.perf_counter() - started
    return {o for part in parts for o in part}, rss_kib(pid) - before, seconds


def measure(root: Path, agents: int) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        memory = Path(tmp) / "memory"
        argv = [str(root / ".venv/bin/python"), "-m", "session_server", "serve", "--port", "0"]
        proc = subprocess.Popen(
            [*argv, "--memory-dir", str(memory)],
            cwd=root,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert proc.stdout is not None
            found = re.search(r"(ws://\S+)", proc.stdout.readline())
            if found is None:
                raise RuntimeError("the server did not print its address")
            answers, grown, seconds = asyncio.run(phase(found.group(1), proc.pid, agents))
        finally:
            proc.kill()
            proc.wait()
        folders = len(list((memory / "agents").iterdir())) if (memory / "agents").exists() else 0
        shown = ", ".join(sorted(answers))
        return f"| {root} | {shown} | {folders} | {grown / 1024:.1f} | {seconds:.1f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout whose server runs")
    parser.add_argument("--agents", type=int, default=1000)
    args = parser.parse_args()
    print("| server | answers | agent folders made | RSS growth MiB | seconds |")
    print("|---|---|---:|---:|---:|")
    print(measure(args.root.resolve(), args.agents))


if __name__ == "__main__":
    main()
