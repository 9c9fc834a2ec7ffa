#!/usr/bin/env python
"""Live turns benchmark: chunk fan-out latency, what 1,000 chunks cost on disk, and a
streamed turn against an unstreamed one.

In one run, against a ``session-server serve`` subprocess on 127.0.0.1 (the clients in
this process, one event loop; timings on a shared machine are noisy):

(l) fan-out latency: one producer appends chunks one at a time (each awaited) while 1,
    10 and 100 ``LiveSubscription`` clients (one connection each) follow the session;
    the latency of a chunk at a subscriber is the time from the ``stream.append`` call
    to the ``stream.chunk`` notification arriving there (p50 / p99 over every chunk and
    subscriber). It includes the commit of the chunk (an append is answered, and its
    chunks sent, once they are durable).
(d) disk per 1,000 chunks: segment rows, chunk bytes stored, and the growth of the agent
    file plus its WAL, for 1,000 chunks appended one per call (awaited) and for 1,000
    written through ``StreamWriter`` (one append in flight, the rest coalesced); and how
    many rows and bytes are left after the close (none).
(t) cost of a turn: a 2-message turn whose reply is 200 chunks, stored with
    ``turn.persist`` only, against ``stream.open`` + the chunks (through ``StreamWriter``)
    + ``stream.close {turn}``; mean ms per turn over ``--turns`` turns.

Run: ``.venv/bin/python scripts/bench_streams.py [--chunks 300] [--turns 20]``
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from session_server.client import SessionClient
from session_server.client.live import LiveSubscription, StreamChunk
from tests.support.bench_env import use_shared_tiktoken
from tests.support.server import ServerProcess

AGENT = "bench-streams"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def fan_out(url: str, subscribers: int, chunks: int) -> tuple[float, float]:
    async with SessionClient(url, AGENT) as producer:
        sid = await producer.create_session()
        clients = [await SessionClient(url, AGENT).connect() for _ in range(subscribers)]
        sent: dict[int, float] = {}
        latencies: list[float] = []
        done = asyncio.Event()
        remaining = [subscribers * chunks]

        async def follow(sub: LiveSubscription) -> None:
            async for item in sub:
                if isinstance(item, StreamChunk):
                    now = time.perf_counter()
                    first = item.cursor - len(item.chunks) + 1
                    for cursor in range(first, item.cursor + 1):
                        latencies.append(now - sent[cursor])
                        remaining[0] -= 1
                    if remaining[0] <= 0:
                        done.set()

        subs = [await c.subscribe_live(sid) for c in clients]
        tasks = [asyncio.ensure_future(follow(s)) for s in subs]
        opened = await producer.stream_open(sid)
        base = opened["cursor"]
        for i in range(1, chunks + 1):
            sent[base + i] = time.perf_counter()
            await producer.stream_append(
                opened["stream_id"], opened["generation"], [{"type": "text", "text": f"t{i} "}]
            )
        await asyncio.wait_for(done.wait(), 120)
        await producer.stream_close(opened["stream_id"], opened["generation"])
        for task in tasks:
            task.cancel()
        for c in clients:
            await c.close()
    ms = [x * 1000 for x in latencies]
    return pct(ms, 0.5), pct(ms, 0.99)


def disk(path: Path) -> tuple[int, int, int]:
    """(segment rows, chunk bytes stored, file + WAL bytes)."""
    with sqlite3.connect(path) as conn:
        rows, size = conn.execute(
            "SELECT COUNT(*), COALESCE(SUM(LENGTH(data)), 0) FROM stream_segments"
        ).fetchone()
    wal = path.with_name(path.name + "-wal")
    on_disk = path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    return int(rows), int(size), on_disk


async def per_thousand(url: str, path: Path, coalesced: bool) -> dict[str, int]:
    async with SessionClient(url, AGENT) as client:
        sid = await client.create_session()
        writer = await client.stream(sid)
        _, _, before = disk(path)
        calls = 0
        for i in range(1000):
            chunk = {"type": "text", "text": f"token{i} "}
            if coalesced:
                await writer.write(chunk)
            else:
                writer.cursor = await client.stream_append(
                    writer.stream_id, writer.generation, [chunk], after_cursor=writer.cursor
                )
                calls += 1
        await writer.flush()
        rows, size, after = disk(path)
        await writer.close([{"role": "assistant", "content": "x"}])
        rows_left, size_left, _ = disk(path)
    return {
        "rows": rows,
        "chunk_bytes": size,
        "file_growth": after - before,
        "rows_after_close": rows_left,
        "bytes_after_close": size_left,
    }


async def turn_cost(url: str, turns: int, chunks: int) -> tuple[float, float]:
    words = [f"w{i} " for i in range(chunks)]
    reply = "".join(words)
    messages = [{"role": "user", "content": "go"}, {"role": "assistant", "content": reply}]
    async with SessionClient(url, AGENT) as client:
        sid = await client.create_session()
        started = time.perf_counter()
        for _ in range(turns):
            await client.persist_turn(sid, messages)
        plain = (time.perf_counter() - started) / turns
        started = time.perf_counter()
        for _ in range(turns):
            writer = await client.stream(sid)
            for w in words:
                await writer.write({"type": "text", "text": w})
            await writer.close(messages)
        streamed = (time.perf_counter() - started) / turns
    return plain * 1000, streamed * 1000


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        memory = Path(tmp) / "memory"
        server = ServerProcess(memory, "--synchronous", args.synchronous)
        await asyncio.to_thread(server.start)
        try:
            url = server.url
            print(f"synchronous={args.synchronous}; timings are noisy (shared machine)")
            for n in (1, 10, 100):
                p50, p99 = await fan_out(url, n, args.chunks)
                print(f"(l) fan-out to {n:>3} subscribers: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
            path = memory / "agents" / AGENT / "agent.sqlite"
            for coalesced in (False, True):
                figures = await per_thousand(url, path, coalesced)
                how = "StreamWriter (coalesced)" if coalesced else "one chunk per append"
                print(f"(d) 1,000 chunks, {how}: {figures}")
            plain, streamed = await turn_cost(url, args.turns, 200)
            print(
                f"(t) 2-message turn, reply of 200 chunks: turn.persist {plain:.2f} ms, "
                f"streamed {streamed:.2f} ms ({streamed / plain:.1f}x)"
            )
        finally:
            await asyncio.to_thread(server.terminate)


def main() -> None:
    use_shared_tiktoken()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=300)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--synchronous", choices=("FULL", "NORMAL"), default="FULL")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
