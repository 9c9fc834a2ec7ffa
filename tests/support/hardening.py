"""Hostile-client scenarios shared by ``tests/faults/test_hardening.py`` and
``scripts/bench_hardening.py`` (issue 13). Each runs against a server at ``url`` (process
``pid``, for its RSS) on 127.0.0.1, bounded in count and time.

- ``non_reading_pipeliner``: one connection pipelines ``requests`` ``events.load`` calls
  with large answers and reads none.
- ``batch_bomb``: frames that are batches of the maximum length, each item asking for a
  large answer.
- ``big_frames``: ``count`` connections each send one ``events.append`` frame of ``mib``
  MiB at the same time.
- ``non_reading_subscriber``: ``subscribers`` connections subscribe and never read while
  a writer appends ``megabytes`` MB; the writer's append latencies are kept.
- ``raw_non_readers``: ``clients`` raw sockets each send ``requests`` ``events.load``
  calls after the handshake and never ``recv()`` (the kernel's receive buffer is all
  they take); ``unread_answers`` runs them and reports the server's peak RSS.
- ``Probe``: another client on another agent, timing small calls meanwhile (its own
  process, so the scenario's client work does not count in its latencies).

``watch_rss(pid, until)`` samples the server's RSS every 20 ms; the peak is the figure.
"""

from __future__ import annotations

import asyncio
import base64
import multiprocessing
import os
import socket
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import msgspec
from websockets.asyncio.client import ClientConnection, connect
from websockets.frames import Frame, Opcode

from session_server.client import SessionClient
from tests.support.load import rss_kib

__all__ = [
    "Probe",
    "batch_bomb",
    "big_frames",
    "noise",
    "non_reading_pipeliner",
    "non_reading_subscriber",
    "percentile",
    "prepare_agent",
    "raw_non_readers",
    "unread_answers",
    "watch_rss",
]

_ENC = msgspec.json.Encoder()
SESSION = "s"


def noise(n: int) -> str:
    """``n`` characters deflate cannot shrink."""
    return os.urandom(n // 2 + 1).hex()[:n]


def request(rid: int, method: str, **params: Any) -> bytes:
    """One JSON-RPC request frame."""
    return _ENC.encode({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def prepare_agent(url: str, agent: str, *, events: int, size: int) -> None:
    """Session ``s`` of ``agent`` with ``events`` events of ``size`` characters."""
    async with SessionClient(url, agent, max_size=None) as client:
        await client.create_session(session_id=SESSION)
        for start in range(0, events, 10):
            batch = [{"content": noise(size)} for _ in range(min(10, events - start))]
            await client.append_events(SESSION, batch)


async def stalled(url: str, agent: str) -> ClientConnection:
    """A connection that buffers one frame and then stops reading its socket."""
    return await connect(f"{url}/v1/agents/{agent}", max_queue=1, max_size=None, compression=None)


async def watch_rss(pid: int | None, until: asyncio.Future[Any] | float) -> int:
    """Peak RSS (KiB) of ``pid`` until ``until`` is done (or for that many seconds)."""
    if pid is None:
        if isinstance(until, float):
            await asyncio.sleep(until)
        else:
            await until
        return 0
    peak = rss_kib(pid)
    deadline = time.monotonic() + until if isinstance(until, float) else None
    while True:
        peak = max(peak, rss_kib(pid))
        if deadline is not None and time.monotonic() >= deadline:
            return peak
        if not isinstance(until, float) and until.done():
            return peak
        await asyncio.sleep(0.02)


def _load(rid: int) -> bytes:
    return _ENC.encode(
        {
            "jsonrpc": "2.0",
            "id": rid,
            "method": "events.load",
            "params": {"session_id": SESSION, "limit": None},
        }
    )


def raw_non_reader(url: str, agent: str, frames: list[bytes]) -> socket.socket:
    """A plain TCP socket that opens a WebSocket to ``agent``, sends ``frames`` (masked
    text frames, as a client must) and is then never read: its receive buffer is kept
    small, so nearly everything the server sends stays on the server's side."""
    host, port = url.removeprefix("ws://").rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall(
        (
            f"GET /v1/agents/{agent} HTTP/1.1\r\nHost: {host}:{port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)  # byte by byte: nothing past the handshake is taken
        if not chunk:
            raise ConnectionError("the server closed the handshake")
        head += chunk
    if not head.startswith(b"HTTP/1.1 101"):
        raise ConnectionError(head.decode("latin-1").splitlines()[0])
    for frame in frames:
        sock.sendall(Frame(Opcode.TEXT, frame).serialize(mask=True))
    return sock


async def raw_non_readers(
    url: str, agent: str, *, clients: int, requests: int
) -> list[socket.socket]:
    """``clients`` raw non-reading sockets, each having sent ``requests`` loads of the whole
    session ``s`` (``limit: null``)."""
    frames = [_load(i) for i in range(requests)]
    return [await asyncio.to_thread(raw_non_reader, url, agent, frames) for _ in range(clients)]


async def unread_answers(
    url: str,
    agent: str,
    *,
    clients: int,
    requests: int,
    pid: int,
    settle_s: float = 3.0,
    ceiling_kib: int | None = None,
    limit_s: float = 60.0,
) -> int:
    """Run ``raw_non_readers`` and return the server's peak RSS (KiB): sampled until it
    has not risen for ``settle_s`` seconds (at most ``limit_s``), or until it passes
    ``ceiling_kib`` (the caller's bound: no point growing further)."""
    socks = await raw_non_readers(url, agent, clients=clients, requests=requests)
    try:
        peak = rss_kib(pid)
        risen_at = time.monotonic()
        started = risen_at
        while True:
            now_kib = rss_kib(pid)
            now = time.monotonic()
            if now_kib > peak:
                peak, risen_at = now_kib, now
            if ceiling_kib is not None and peak > ceiling_kib:
                return peak
            if now - risen_at >= settle_s or now - started >= limit_s:
                return peak
            await asyncio.sleep(0.02)
    finally:
        for sock in socks:
            sock.close()


async def non_reading_pipeliner(
    url: str,
    agent: str,
    *,
    requests: int,
    pid: int | None = None,
    watch_s: float = 3.0,
    stop: asyncio.Event | None = None,
    sent: asyncio.Event | None = None,
) -> int:
    """Send ``requests`` loads without reading; return the server's peak RSS (KiB) over
    ``watch_s`` seconds after the last send (or until ``stop`` is set; ``sent`` is set
    once every request is written to the socket)."""
    ws = await stalled(url, agent)
    try:
        sending = asyncio.ensure_future(_send_all(ws, requests))
        peak = await watch_rss(pid, sending)
        if sent is not None:
            sent.set()
        if stop is not None:
            await stop.wait()
            return peak
        return max(peak, await watch_rss(pid, watch_s))
    finally:
        ws.transport.abort()


async def _send_all(ws: ClientConnection, requests: int) -> None:
    try:
        for i in range(requests):
            await ws.send(_load(i), text=True)
    except Exception:  # the server may drop us (stop): that ends the scenario
        return


async def batch_bomb(
    url: str, agent: str, *, frames: int, batch: int = 64, pid: int | None = None
) -> tuple[int, int]:
    """``frames`` batches of ``batch`` full loads each, answers read; returns the peak
    RSS (KiB) and the number of items refused as too large."""
    items = [
        {"jsonrpc": "2.0", "id": i, "method": "events.load", "params": {"session_id": SESSION}}
        for i in range(batch)
    ]
    frame = _ENC.encode(items)
    refused = 0

    async def run() -> None:
        nonlocal refused
        async with connect(f"{url}/v1/agents/{agent}", max_size=None) as ws:
            for _ in range(frames):
                await ws.send(frame, text=True)
                answer = msgspec.json.decode(await ws.recv(decode=False))
                if isinstance(answer, dict):
                    refused += batch
                else:
                    refused += sum(1 for a in answer if "error" in a)

    task = asyncio.ensure_future(run())
    peak = await watch_rss(pid, task)
    await task
    return peak, refused


async def big_frames(
    url: str, agent: str, *, count: int = 12, mib: float = 15, pid: int | None = None
) -> tuple[int, list[float]]:
    """``count`` connections each append one frame of ``mib`` MiB at once; returns the
    peak RSS (KiB) and each append's latency (s)."""
    content = noise(int(mib * 1024 * 1024) - 200)
    frames = [
        _ENC.encode(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "events.append",
                "params": {"session_id": f"big-{i}", "events": [{"content": content}]},
            }
        )
        for i in range(count)
    ]
    del content
    async with SessionClient(url, agent) as setup:
        for i in range(count):
            await setup.create_session(session_id=f"big-{i}")
    latencies: list[float] = []

    async def one(frame: bytes) -> None:
        async with connect(f"{url}/v1/agents/{agent}", max_size=None, compression=None) as ws:
            started = time.perf_counter()
            await ws.send(frame, text=True)
            answer = msgspec.json.decode(await ws.recv(decode=False))
            assert "result" in answer, answer
            latencies.append(time.perf_counter() - started)

    task = asyncio.ensure_future(asyncio.gather(*(one(f) for f in frames)))
    peak = await watch_rss(pid, task)
    await task
    return peak, latencies


@dataclass
class SubscriberReport:
    peak_kib: int
    appends: int
    append_latencies: list[float] = field(default_factory=list)


async def non_reading_subscriber(
    url: str,
    agent: str,
    *,
    megabytes: float,
    pid: int | None = None,
    subscribers: int = 1,
    chunk: int = 256 * 1024,
    reading: bool = False,
) -> SubscriberReport:
    """``subscribers`` connections subscribe to session ``sub`` and never read (or read,
    with ``reading``) while one writer appends ``megabytes`` MB in ``chunk``-byte events."""
    async with SessionClient(url, agent) as setup:
        await setup.create_session(session_id="sub", if_exists="return")
    conns: list[ClientConnection] = []
    readers: list[asyncio.Task[None]] = []
    for _ in range(subscribers):
        ws = await stalled(url, agent)
        await ws.send(
            _ENC.encode(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "events.subscribe",
                    "params": {"session_id": "sub"},
                }
            ),
            text=True,
        )
        await ws.recv()
        conns.append(ws)
        if reading:
            readers.append(asyncio.create_task(_drain(ws)))
    report = SubscriberReport(0, 0)
    content = noise(chunk)

    async def write() -> None:
        async with SessionClient(url, agent, max_size=None) as writer:
            written = 0
            while written < megabytes * 1_000_000:
                started = time.perf_counter()
                await writer.append_events("sub", [{"content": content}])
                report.append_latencies.append(time.perf_counter() - started)
                written += chunk
                report.appends += 1

    try:
        task = asyncio.ensure_future(write())
        report.peak_kib = await watch_rss(pid, task)
        await task
    finally:
        for reader in readers:
            reader.cancel()
        for ws in conns:
            ws.transport.abort()
    return report


async def _drain(ws: ClientConnection) -> None:
    try:
        async for _ in ws:
            pass
    except Exception:
        return


class Probe:
    """A client on another agent timing ``session.get`` round trips in a separate process
    (its own interpreter and loop: the scenario's client work does not count in its
    latencies) until the ``with`` block ends; ``latencies`` in seconds."""

    def __init__(self, url: str, agent: str = "probe-agent") -> None:
        self.url = url
        self.agent = agent
        self.latencies: list[float] = []
        context = multiprocessing.get_context("spawn")
        self._stop = context.Event()
        self._ready = context.Event()
        self._results, child = context.Pipe(duplex=False)
        self._process = context.Process(
            target=_probe_main, args=(url, agent, self._stop, self._ready, child), daemon=True
        )

    def __enter__(self) -> Probe:
        self._process.start()
        if not self._ready.wait(60):
            self._process.kill()
            raise RuntimeError("probe did not connect")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._results.poll(60):
            self.latencies = list(self._results.recv())
        self._process.join(30)

    def summary(self) -> dict[str, float]:
        values = self.latencies
        return {
            "calls": float(len(values)),
            "p50_ms": 1000 * statistics.median(values) if values else 0.0,
            "p99_ms": 1000 * percentile(values, 0.99),
            "max_ms": 1000 * max(values) if values else 0.0,
        }


def _probe_main(url: str, agent: str, stop: Any, ready: Any, results: Any) -> None:
    latencies: list[float] = []

    async def run() -> None:
        async with SessionClient(url, agent) as client:
            sid = await client.create_session()
            ready.set()
            while not stop.is_set():
                started = time.perf_counter()
                await client.get_session(sid)
                latencies.append(time.perf_counter() - started)
                await asyncio.sleep(0.005)

    asyncio.run(run())
    results.send(latencies)
