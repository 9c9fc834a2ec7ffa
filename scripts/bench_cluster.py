"""Cluster benchmark: what cluster mode costs against the single node, in the same run.

Run: ``.venv/bin/python scripts/bench_cluster.py [--turns N] [--rebuild-events N ...]
[--faults]``. Real nats-server processes (``tests/support/nats_cluster.py``), fresh
folders in a temporary directory.

1. Turn latency (p50, p99) of ``persist_working_context`` (a two-message turn after a
   ``build_working_context``, with an idempotency key) through an ``ActorRegistry``:
   single node (no turn log), cluster on 1 nats-server (R1), cluster on 3 (R3).
2. Rebuild: an agent of N events written by node A (appends of 100 events), then node B
   claims it with an empty memory dir and opens it: seconds to replay the log, and
   seconds to install a snapshot A took at the end (automatic snapshots come every
   10,000 records or 16 MiB of records).
3. ``--faults``: 3 nats-servers and 3 ``serve --cluster`` nodes; a writer through the
   owner; seconds from the fault to the next acknowledged turn, per fault kind (SIGKILL of
   the owner node, SIGSTOP of the owner, SIGKILL of the stream leader); RSS per node and
   per nats-server.

The machine is shared (2 cores): figures are noisy; run twice and compare.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from session_server import ActorRegistry  # noqa: E402
from session_server.runtime.cluster_node import ClusterNode  # noqa: E402
from session_server.storage.store import AgentStore  # noqa: E402
from session_server.values.events import ContextMessage, SessionEvent  # noqa: E402
from tests.support.bench_env import use_shared_tiktoken  # noqa: E402
from tests.support.nats_cluster import NatsCluster  # noqa: E402


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@asynccontextmanager
async def registry(root: Path, node: ClusterNode | None) -> AsyncIterator[ActorRegistry]:
    async with ActorRegistry(root, idle_timeout=None, turn_logs=node) as reg:
        yield reg


async def turn_latencies(reg: ActorRegistry, turns: int) -> list[float]:
    actor = await reg.get("bench")
    sid = await actor.create_session()
    out: list[float] = []
    for n in range(turns):
        started = time.perf_counter()
        ctx = await actor.build_working_context(sid, limit=50)
        ctx.add_message(ContextMessage(role="user", content=f"question {n} " * 20))
        ctx.add_message(ContextMessage(role="assistant", content=f"answer {n} " * 40))
        await actor.persist_working_context(sid, ctx, idempotency_key=f"k{n}")
        out.append(time.perf_counter() - started)
    return out[len(out) // 10 :]  # the first tenth warms up


async def latency_rows(tmp: Path, turns: int) -> list[str]:
    rows = []
    async with registry(tmp / "single", None) as reg:
        single = await turn_latencies(reg, turns)
    rows.append(("single node", single))
    for size in (1, 3):
        nats = await NatsCluster.start(tmp / f"nats{size}", size)
        try:
            node = ClusterNode(nats.urls, "a", "ws://a.invalid", prefix=f"lat{size}")
            await node.start()
            try:
                async with registry(tmp / f"cluster{size}", node) as reg:
                    rows.append(
                        (
                            f"cluster, {size} nats-server(s), R{size}",
                            await turn_latencies(reg, turns),
                        )
                    )
            finally:
                await node.stop()
        finally:
            nats.stop()
    base = statistics.median(single)
    return [
        f"| {name} | {pct(v, 0.5) * 1e3:.2f} | {pct(v, 0.99) * 1e3:.2f} | "
        f"{statistics.median(v) / base:.2f}x |"
        for name, v in rows
    ]


async def rebuild_row(tmp: Path, events: int, with_snapshot: bool) -> str:
    tag = f"{events}{'s' if with_snapshot else ''}"
    nats = await NatsCluster.start(tmp / f"nats-rebuild{tag}", 1)
    try:
        a = ClusterNode(
            nats.urls,
            "a",
            "ws://a.invalid",
            prefix=f"rb{tag}",
            snapshot_every=10**9,
            snapshot_bytes=2**62,
        )  # snapshots only where this run takes one
        await a.start()
        async with registry(tmp / f"rb-a{tag}", a) as reg:
            actor = await reg.get("big")
            sid = await actor.create_session()
            for start in range(0, events, 100):
                batch = [
                    SessionEvent(action="user_message", content=f"event {n} " + "text " * 30)
                    for n in range(start, min(events, start + 100))
                ]
                await actor.append_events(sid, batch)
            snapshot_events = 0
            if with_snapshot:
                await a.snapshot(await a.acquire("big", actor.path))
                snapshot_events = events
        await a.stop()
        b = ClusterNode(nats.urls, "b", "ws://b.invalid", prefix=f"rb{tag}")
        await b.start()
        try:
            started = time.perf_counter()
            agent_log = await b.acquire("big", tmp / f"rb-b{tag}" / "agent.db")
            store = await AgentStore.open(
                tmp / f"rb-b{tag}" / "agent.db", "big", turn_log=agent_log
            )
            seconds = time.perf_counter() - started
            count = await store.count_events(sid, 1, events + 1)
            await store.close()
        finally:
            await b.stop()
        assert count == events, (count, events)
        source = "a snapshot" if snapshot_events else "the log only (no snapshot)"
        return f"| {events} events, from {source} | {seconds:.2f} s |"
    finally:
        nats.stop()


async def fault_rows(tmp: Path) -> list[str]:
    from tests.support.cluster_nodes import ClusterNodes, TurnWriter

    rows = []
    for kind in ("sigkill-owner", "sigstop-owner", "sigkill-stream-leader"):
        nats = await NatsCluster.start(tmp / f"nats-{kind}", 3)
        nodes = ClusterNodes(nats, tmp / f"nodes-{kind}")
        try:
            await nodes.start()
            writer = TurnWriter(nodes, f"agent-{kind}")
            await writer.turns(0, 20)
            if kind == "sigkill-owner":
                nodes.kill(await nodes.owner(writer.agent_id))
            elif kind == "sigstop-owner":
                nodes.freeze(await nodes.owner(writer.agent_id))
            else:
                import nats as nats_client

                nc = await nats_client.connect(nats.urls)
                info = await nc.jetstream().stream_info("SS_TURNS")
                await nc.close()
                assert info.cluster is not None and info.cluster.leader is not None
                nats.kill(str(info.cluster.leader))
            started = time.perf_counter()
            await writer.turn(20)
            gap = time.perf_counter() - started
            await writer.turns(21, 9)
            assert await writer.stored() == writer.expected()
            node_rss = {n: _rss(nodes.procs[n].pid) for n in nodes.alive()}
            nats_rss = nats.rss_bytes()
            await writer.close()
            rows.append(
                f"| {kind} | {gap:.2f} s | nodes RSS MiB: "
                + ", ".join(f"{k} {v / 2**20:.0f}" for k, v in node_rss.items())
                + " | nats-servers RSS MiB: "
                + ", ".join(f"{k} {v / 2**20:.0f}" for k, v in nats_rss.items())
                + " |"
            )
        finally:
            nodes.stop()
            nats.stop()
    return rows


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--rebuild-events", type=int, nargs="*", default=[10_000])
    parser.add_argument("--faults", action="store_true")
    args = parser.parse_args()
    use_shared_tiktoken()
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        print("| turn (build + persist) | p50 ms | p99 ms | median vs single |")
        print("|---|---|---|---|")
        for row in await latency_rows(tmp, args.turns):
            print(row, flush=True)
        print()
        print("| rebuild | seconds |")
        print("|---|---|")
        for events in args.rebuild_events:
            for with_snapshot in (False, True):
                print(await rebuild_row(tmp, events, with_snapshot), flush=True)
        if args.faults:
            print()
            print("| fault | fault to next acknowledged turn | RSS | RSS |")
            print("|---|---|---|---|")
            for row in await fault_rows(tmp):
                print(row, flush=True)


if __name__ == "__main__":
    asyncio.run(main())
