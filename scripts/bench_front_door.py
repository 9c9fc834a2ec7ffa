#!/usr/bin/env python
"""Front door benchmark: what forwarding a connection to the agent's owner costs, and
that a server without a directory pays nothing for the feature.

In one run, on 127.0.0.1, three in-process servers on one event loop with the clients
(timings on a shared machine are noisy): ``owner`` (single node, no directory), ``local``
(cluster mode whose directory places every agent here: a lookup per handshake, nothing
per call) and ``door`` (cluster mode whose directory places the agent at ``owner``: every
connection forwarded). For each target:

(s) sequential ``turn.persist`` calls of a 2-message turn (``SessionClient.persist_turn``
    with an idempotency key) on one connection: calls/s, p50 and p99 latency (ms);
(o) connection opens (handshake to the first answer of ``session.list``): p50 and p99 ms.

Run: ``.venv/bin/python scripts/bench_front_door.py [--calls 2000] [--opens 200]
[--targets owner,local,door]``; ``owner`` alone runs on a checkout without the feature
(``--targets owner``), for the before/after comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from session_server.client import SessionClient
from session_server.runtime.registry import ActorRegistry
from session_server.server import SessionServer
from tests.support.bench_env import use_shared_tiktoken

AGENT = "bench-door"
SECRET = b"bench-front-door-cluster-secret-32-bytes"


class Directory:
    """Every agent at ``url`` (``None``: here)."""

    def __init__(self, url: str | None) -> None:
        self.url = url

    async def locate(self, agent_id: str) -> Any:
        from session_server.values.ownership import OwnerLocation

        return None if self.url is None else OwnerLocation("owner", self.url, 1)

    def forget(self, agent_id: str) -> None:
        return None


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def sequential(url: str, calls: int) -> tuple[float, float, float]:
    async with SessionClient(url, AGENT) as client:
        sid = await client.create_session()
        latencies: list[float] = []
        start = time.perf_counter()
        for i in range(calls):
            t0 = time.perf_counter()
            await client.persist_turn(
                sid,
                [{"role": "user", "content": f"q {i}"}, {"role": "assistant", "content": "a"}],
                idempotency_key=f"k{i}",
            )
            latencies.append(time.perf_counter() - t0)
        elapsed = time.perf_counter() - start
    return calls / elapsed, pct(latencies, 0.5) * 1e3, pct(latencies, 0.99) * 1e3


async def opens(url: str, count: int) -> tuple[float, float]:
    latencies: list[float] = []
    for _ in range(count):
        t0 = time.perf_counter()
        async with SessionClient(url, AGENT) as client:
            await client.list_sessions(limit=1)
        latencies.append(time.perf_counter() - t0)
    return pct(latencies, 0.5) * 1e3, pct(latencies, 0.99) * 1e3


async def run(args: argparse.Namespace) -> None:
    targets = args.targets.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        async with contextlib.AsyncExitStack() as stack:
            servers: dict[str, SessionServer] = {}

            async def start(name: str, **options: Any) -> SessionServer:
                registry = await stack.enter_async_context(ActorRegistry(Path(tmp) / name))
                server = SessionServer(registry, port=0, **options)
                await server.start()
                stack.push_async_callback(server.stop)
                servers[name] = server
                return server

            owner = await start("owner")
            if "local" in targets:
                await start("local", owner_directory=Directory(None), cluster_secret=SECRET)
            if "door" in targets:
                await start("door", owner_directory=Directory(owner.url), cluster_secret=SECRET)
            for name in targets:
                url = servers[name].url
                rate, p50, p99 = await sequential(url, args.calls)
                o50, o99 = await opens(url, args.opens)
                print(
                    f"{name:6s} (s) {rate:7.0f} calls/s  p50 {p50:6.2f} ms  p99 {p99:6.2f} ms"
                    f"   (o) open p50 {o50:6.2f} ms  p99 {o99:6.2f} ms",
                    flush=True,
                )


def main() -> None:
    use_shared_tiktoken()
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--opens", type=int, default=200)
    parser.add_argument("--targets", default="owner,local,door")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
