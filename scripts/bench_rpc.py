#!/usr/bin/env python
"""RPC benchmark: ``turn.persist`` over the real server and client against its bound.

In one run, on 127.0.0.1 (server and client in this process, one event loop), at one
``synchronous`` level (NORMAL by default):

(a) sequential round trips per second against a bare ``websockets`` echo server, sending
    the same JSON text a ``turn.persist`` request carries;
(r) raw ``sqlite3`` commits per second of the same turn (4 event rows and the session row
    in one ``BEGIN IMMEDIATE`` transaction, the store's schema, WAL, the same level);
    the bound for a sequential call is one echo round trip plus one raw commit:
    ``1 / (1/a + 1/r)`` calls per second;
(b) sequential ``turn.persist`` calls (``SessionClient.persist_turn``) of a 4-message turn
    (user, assistant tool call, tool result, assistant answer): target at least 50% of the
    bound;
(p) ``--pipeline`` requests in flight on one connection and one session (pipelining);
(w) ``--writers`` connections on one agent, one session each (group commit);
(c) ``--agents`` connections on as many agents, each doing sequential calls.

(f) is the floor of (b): the bound plus the two costs a ``turn.persist`` has on top of it and
cannot drop (the token count of the turn and one worker-thread round trip for the commit,
measured as ``bench_store``'s floor); (f)/bound is the most (b)/bound can be here.

(a-x) and (b-x) are (a) and (b) with the client in another process, as a server's clients
are: the server (echo, or ours) runs in this process and a subprocess of this script
(``--client bare|persist --url URL``) makes the sequential calls and reports its rate;
(b-x) is compared with the bound of (a-x) and (r). (b-xr) is (b-x) with the bare client
of (a-x) (the same request texts, raw ``websockets``, no ``SessionClient``), and (m-x) the
same bare client against ``minimal_server.py``: the least a ``turn.persist`` server does
(decode, validate, count, one worker-thread commit), in this same stack. (m-x)/bound-x is
the measured limit of a sequential call here. (b-xr-m) is (b-xr) against a server
without the JSONL mirror, and (b-xr-mk) the same with requests that carry no idempotency
key: what those two parts of the contract cost in our server, measured in the same rounds.
(m-xk) is the minimal server that also writes the request's idempotency key and the
turn's tool call in its transaction (as the store does), and (m-xkm) that one with the
JSONL mirror too (``MirrorWriter`` on a thread of its own, batched every 50 ms as ours):
the least a server can do that keeps the whole contract of a ``turn.persist``, so
(m-xkm)/bound-x is the limit of (b-xr), and (b-xr)/(m-xkm) what our server's own code
costs beside it.
For the servers of (a-x), (m-x), (m-xk), (m-xkm), (b-xr) and its ablation, this process's CPU time per call
is reported (Linux: ``/proc/self/task``), on the event-loop thread and on the others
(writer, mirror).

Three diagnostics split (b): the same calls against a server without the JSONL mirror
(b-m), the RPC stack alone (framing and params validation of the same
request, no actor) and the local actor call alone (no RPC). ``--loop`` picks the event loop
as ``session-server serve --loop`` does (default auto: uvloop when installed).

Run: ``.venv/bin/python scripts/bench_rpc.py [--calls 2000] [--synchronous NORMAL]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dataclasses import dataclass

from minimal_server import INSERT_EVENT, minimal_server, open_turn_db
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve

from session_server.cli.serve import _loop_factory
from session_server.client import SessionClient
from session_server.rpc.method_spec import CallContext, MethodSpec, method_table
from session_server.rpc.params import PersistParams
from session_server.rpc.table import ROWS
from session_server.runtime.registry import ActorRegistry
from session_server.server import SessionServer
from session_server.values.codec import dehydrate_event, message_to_event
from session_server.values.context import WorkingContext
from session_server.values.events import ContextMessage, SessionEvent, ToolCall
from session_server.values.tokens import get_counter
from tests.support.bench_env import token_mode, use_shared_tiktoken

use_shared_tiktoken()


async def validate_only(ctx: CallContext, p: PersistParams) -> dict[str, object]:
    """turn.persist's params validation and framing, without the actor (diagnostic)."""
    return {"seqs": [1, 2, 3, 4], "last_seq": 4, "compaction_required": False}


METHODS = method_table(
    ROWS, [MethodSpec("bench.validate_only", PersistParams, validate_only, scope="write")]
)


def turn(n: int) -> list[ContextMessage]:
    call_id = f"call-{n}"
    return [
        ContextMessage(role="user", content=f"What is the weather in city number {n}?"),
        ContextMessage(
            role="assistant",
            content="",
            tool_calls=[ToolCall(id=call_id, name="get_weather", arguments={"city": f"c{n}"})],
        ),
        ContextMessage(
            role="tool",
            content='{"temperature": 21, "conditions": "sunny"}',
            tool_call_id=call_id,
            name="get_weather",
        ),
        ContextMessage(role="assistant", content=f"It is sunny and 21 degrees in city {n}."),
    ]


def turn_events(n: int) -> list[SessionEvent]:
    """``turn(n)`` as the events ``turn.persist`` stores (what the server counts)."""
    return [message_to_event("s", m) for m in turn(n)]


def request_text(n: int, keyed: bool = True) -> str:
    """The ``turn.persist`` request of turn ``n`` (session ``s``), with a fresh
    idempotency key unless ``keyed`` is false."""
    import msgspec

    params: dict[str, Any] = {"session_id": "s", "messages": msgspec.to_builtins(turn(n))}
    if keyed:
        params["idempotency_key"] = str(uuid.uuid4())
    return json.dumps({"jsonrpc": "2.0", "id": n, "method": "turn.persist", "params": params})


async def _echo(ws: ServerConnection) -> None:
    """The bare echo server's handler."""
    async for message in ws:
        await ws.send(message)


async def _bare_calls(url: str, calls: int, warmup: int, keyed: bool = True) -> float:
    """Sequential round trips per second of ``turn.persist`` request texts (session
    ``s``; ``keyed``: each with an idempotency key) sent by a bare ``websockets`` client
    to the server at ``url`` (the echo, the minimal server or ours)."""
    async with connect(url) as ws:
        texts = [request_text(i, keyed) for i in range(calls + warmup)]
        for text in texts[:warmup]:
            await ws.send(text)
            await ws.recv()
        start = time.perf_counter()
        for text in texts[warmup:]:
            await ws.send(text)
            await ws.recv()
        return calls / (time.perf_counter() - start)


async def echo_rate(calls: int, warmup: int) -> float:
    async with serve(_echo, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        return await _bare_calls(f"ws://127.0.0.1:{port}", calls, warmup)


def raw_commit_rate(path: Path, synchronous: str, calls: int, warmup: int) -> float:
    """Raw ``sqlite3`` commits per second of one turn's rows (the storage part of the bound)."""
    conn = open_turn_db(path, synchronous)  # the minimal server's file, as ours
    seq = 0
    start = 0.0
    for n in range(warmup + calls):
        if n == warmup:
            start = time.perf_counter()
        rows = []
        for m in turn(n):
            seq += 1
            d = dehydrate_event(message_to_event("s", m))
            rows.append((d["id"], "s", seq, d["action"], d["content"], d["metadata"],
                         d["created_at"], n, seq, 10))  # fmt: skip
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(INSERT_EVENT, rows)
        conn.execute(
            "UPDATE sessions SET last_seq = ?, last_turn = ?, updated_at = ? WHERE id = 's'",
            (seq, n, n),
        )
        conn.execute("COMMIT")
    rate = calls / (time.perf_counter() - start)
    conn.close()
    return rate


@dataclass
class Rates:
    sequential: float
    pipelined: float
    writers: float
    agents: float
    stack_only: float
    local: float
    unmirrored: float


async def persist_rates(
    calls: int,
    warmup: int,
    agents: int,
    *,
    synchronous: str = "NORMAL",
    pipeline: int = 16,
    writers: int = 32,
) -> Rates:
    with tempfile.TemporaryDirectory() as tmp:
        async with ActorRegistry(Path(tmp), synchronous=synchronous) as registry:  # type: ignore[arg-type]
            # The registry loads the token encoding on a worker thread at start-up (about
            # half a second holding the GIL for much of it): measure after it, not beside.
            await asyncio.to_thread(get_counter)
            server = SessionServer(registry, port=0, methods=METHODS)
            async with server:
                async with SessionClient(server.url, "bench-0") as client:
                    params = {"session_id": "s", "messages": turn(0), "idempotency_key": "k"}
                    for _ in range(warmup):
                        await client.call("bench.validate_only", params)
                    start = time.perf_counter()
                    for _ in range(calls):
                        await client.call("bench.validate_only", params)
                    stack_only = calls / (time.perf_counter() - start)

                    actor = await registry.get("bench-local")
                    local_sid = await actor.create_session()
                    for i in range(-warmup, calls):
                        if i == 0:
                            start = time.perf_counter()
                        ctx = WorkingContext()
                        ctx.add_messages(turn(i))
                        await actor.persist_working_context(
                            local_sid, ctx, idempotency_key=str(uuid.uuid4())
                        )
                    local = calls / (time.perf_counter() - start)

                    sequential = await _sequential_rate(client, calls, warmup)

                    # Pipelining: a window of requests in flight on this one connection.
                    psid = await client.create_session()
                    window = asyncio.Semaphore(pipeline)

                    async def one(i: int) -> None:
                        async with window:
                            await client.persist_turn(psid, turn(i))

                    start = time.perf_counter()
                    await asyncio.gather(*(one(i) for i in range(calls)))
                    pipelined = calls / (time.perf_counter() - start)
                    events = await client.load_events(psid, limit=None)
                    assert [e.seq for e in events] == list(range(1, 4 * calls + 1))

                writers_rate = await _many(server.url, ["bench-w"] * writers, calls)
                agents_rate = await _many(server.url, [f"bench-c{k}" for k in range(agents)], calls)
    unmirrored = await _unmirrored_rate(calls, warmup, synchronous)
    return Rates(sequential, pipelined, writers_rate, agents_rate, stack_only, local, unmirrored)


async def _unmirrored_rate(calls: int, warmup: int, synchronous: str) -> float:
    """Sequential ``turn.persist`` calls/s against a server whose registry keeps no JSONL
    mirror (diagnostic: the mirror's share of (b))."""
    with tempfile.TemporaryDirectory() as tmp:
        registry = ActorRegistry(Path(tmp), synchronous=synchronous, mirror=False)  # type: ignore[arg-type]
        async with (
            registry,
            SessionServer(registry, port=0) as server,
            SessionClient(server.url, "bench-0") as client,
        ):
            return await _sequential_rate(client, calls, warmup)


async def _sequential_rate(client: SessionClient, calls: int, warmup: int) -> float:
    """Sequential ``turn.persist`` calls/s of ``client`` on a new session."""
    sid = await client.create_session()
    for i in range(warmup):
        await client.persist_turn(sid, turn(i))
    start = time.perf_counter()
    for i in range(calls):
        await client.persist_turn(sid, turn(i))
    return calls / (time.perf_counter() - start)


async def _many(url: str, agent_ids: list[str], calls: int) -> float:
    """Aggregate calls/s of one connection per entry of ``agent_ids`` (a session each)."""
    clients = [SessionClient(url, a) for a in agent_ids]
    for c in clients:
        await c.connect()
    try:
        sids = [await c.create_session() for c in clients]
        per_client = max(1, calls // len(clients))

        async def run(c: SessionClient, sid: str) -> None:
            for i in range(per_client):
                await c.persist_turn(sid, turn(i))

        await asyncio.gather(
            *(c.persist_turn(s, turn(0)) for c, s in zip(clients, sids, strict=True))
        )
        start = time.perf_counter()
        await asyncio.gather(*(run(c, s) for c, s in zip(clients, sids, strict=True)))
        return per_client * len(clients) / (time.perf_counter() - start)
    finally:
        for c in clients:
            await c.close()


@dataclass
class Report:
    synchronous: str
    loop: str
    echo: float
    raw_commit: float
    rates: Rates
    # Mean seconds of the two costs a turn.persist has on top of the bound and cannot drop
    # (``bench_store.bench_floor``): the token count of the turn and one worker round trip.
    count_s: float
    hop_s: float
    # Calls/s with the client in another process: (a-x), (b-x), (m-x) and (b-xr).
    echo_apart: Apart
    persist_apart: float
    minimal_apart: Apart
    bare_apart: Apart
    # The minimal server with the contract's storage (``contract``), then with the mirror
    # too (``mirrored``): what a server keeping the whole contract reaches at the least.
    minimal_contract: MinimalContract
    # (b-xr) without the JSONL mirror, then also without idempotency keys: what those two
    # parts of the contract cost, measured (``Ablation``).
    ablation: Ablation

    @property
    def bound_apart(self) -> float:
        """The bound with the echo's client in another process."""
        return 1 / (1 / self.echo_apart.rate + 1 / self.raw_commit)

    @property
    def bound(self) -> float:
        """Calls/s of one echo round trip plus one raw commit, back to back."""
        return 1 / (1 / self.echo + 1 / self.raw_commit)

    @property
    def floor(self) -> float:
        """Calls/s of the bound plus the token count and the worker round trip: the most
        a sequential turn.persist can reach here (no server code, no mirror)."""
        return 1 / (1 / self.bound + self.count_s + self.hop_s)

    def _apart_row(self, label: str, rate: float) -> str:
        ratio = rate / self.bound_apart
        return (
            f"| {label} | {rate:,.0f} | {ratio:.2f} | bound-x, target >= 0.50:"
            f" {'met' if ratio >= 0.5 else '**not met**'}; of (m-x):"
            f" {rate / self.minimal_apart.rate:.2f}; of (m-xkm):"
            f" {rate / self.minimal_contract.mirrored.rate:.2f} |"
        )

    def _minimal_row(self, label: str, apart: Apart) -> str:
        ratio = apart.rate / self.bound_apart
        return (
            f"| {label} | {apart.rate:,.0f} | {ratio:.2f} | bound-x:"
            f" {'at least' if ratio >= 0.5 else 'under'} 0.50 |"
        )

    def cpu_table(self) -> list[str]:
        """This process's CPU time per call while a client in another process called it."""
        rows = [
            "| server (bare client in another process) | event-loop thread, us/call"
            " | other threads, us/call | total |",
            "|---|---:|---:|---:|",
        ]
        for label, apart in (
            ("(a-x) websockets echo", self.echo_apart),
            ("(m-x) minimal server", self.minimal_apart),
            ("(m-xk) minimal server, keys and tool calls", self.minimal_contract.contract),
            ("(m-xkm) minimal server, keys, tool calls and mirror", self.minimal_contract.mirrored),
            ("(b-xr) session-server", self.bare_apart),
            ("(b-xr-m) session-server, no mirror", self.ablation.unmirrored),
            ("(b-xr-mk) session-server, no mirror, no keys", self.ablation.plain),
        ):
            if apart.loop_cpu_us is None or apart.other_cpu_us is None:
                rows.append(f"| {label} | n/a | n/a | n/a |")
                continue
            total = apart.loop_cpu_us + apart.other_cpu_us
            rows.append(
                f"| {label} | {apart.loop_cpu_us:.0f} | {apart.other_cpu_us:.0f} | {total:.0f} |"
            )
        return rows

    def table(self, args: argparse.Namespace) -> list[str]:
        r = self.rates
        ratio = r.sequential / self.bound
        return [
            "| measure | calls/s | ratio | baseline |",
            "|---|---:|---:|---|",
            f"| (a) websockets echo, sequential | {self.echo:,.0f} | 1.00 | (a) |",
            f"| (r) raw sqlite3 commit of the turn, {self.synchronous} | {self.raw_commit:,.0f}"
            " | | |",
            f"| bound: 1 / (1/a + 1/r) | {self.bound:,.0f} | 1.00 | bound |",
            f"| (f) floor: bound + token count ({1e6 * self.count_s:.0f} us) + worker round trip"
            f" ({1e6 * self.hop_s:.0f} us) | {self.floor:,.0f} | {self.floor / self.bound:.2f}"
            " | bound: the most (b) can reach |",
            f"| (b) turn.persist, sequential | {r.sequential:,.0f} | {ratio:.2f}"
            f" | bound, target >= 0.50: {'met' if ratio >= 0.5 else '**not met**'} |",
            f"| (a-x) websockets echo, client in another process | {self.echo_apart.rate:,.0f}"
            f" | {self.echo_apart.rate / self.echo:.2f} | (a) |",
            f"| bound-x: 1 / (1/(a-x) + 1/r) | {self.bound_apart:,.0f} | 1.00 | bound-x |",
            f"| (m-x) minimal server (`minimal_server.py`), the bare client of (a-x)"
            f" | {self.minimal_apart.rate:,.0f} | {self.minimal_apart.rate / self.bound_apart:.2f}"
            " | bound-x: the limit measured in this stack |",
            self._minimal_row(
                "(m-xk) (m-x), writing the idempotency key and the tool call",
                self.minimal_contract.contract,
            ),
            self._minimal_row(
                "(m-xkm) (m-xk), and the JSONL mirror: the whole contract at the least",
                self.minimal_contract.mirrored,
            ),
            self._apart_row("(b-xr) turn.persist, the bare client of (a-x)", self.bare_apart.rate),
            self._apart_row(
                "(b-x) turn.persist, `SessionClient` in another process", self.persist_apart
            ),
            self._apart_row(
                "(b-xr-m) (b-xr), server without the JSONL mirror", self.ablation.unmirrored.rate
            ),
            self._apart_row(
                "(b-xr-mk) (b-xr-m), requests without idempotency keys", self.ablation.plain.rate
            ),
            f"| (b-m) turn.persist, sequential, server without the JSONL mirror"
            f" | {r.unmirrored:,.0f} | {r.unmirrored / self.bound:.2f} | bound |",
            f"| (p) turn.persist, {args.pipeline} pipelined on one connection | {r.pipelined:,.0f}"
            f" | {r.pipelined / r.sequential:.2f} | (b) |",
            f"| (w) turn.persist, {args.writers} connections on one agent | {r.writers:,.0f}"
            f" | {r.writers / r.sequential:.2f} | (b) |",
            f"| (c) turn.persist, {args.agents} connections on {args.agents} agents"
            f" | {r.agents:,.0f} | {r.agents / r.sequential:.2f} | (b) |",
            f"| RPC stack only (framing + validation, no actor) | {r.stack_only:,.0f}"
            f" | {r.stack_only / self.echo:.2f} | (a) |",
            f"| local actor call (no RPC) | {r.local:,.0f} | {r.local / r.sequential:.2f} | (b) |",
        ]


async def measure(args: argparse.Namespace) -> Report:
    a = await echo_rate(args.calls, args.warmup)
    with tempfile.TemporaryDirectory() as tmp:
        raw = await asyncio.to_thread(
            raw_commit_rate, Path(tmp) / "raw.sqlite", args.synchronous, args.calls, args.warmup
        )
    rates = await persist_rates(
        args.calls,
        args.warmup,
        args.agents,
        synchronous=args.synchronous,
        pipeline=args.pipeline,
        writers=args.writers,
    )
    import bench_store  # here: it imports this module's ``run_with_loop``

    # The token count of this benchmark's own turn (smaller than bench_store's).
    count, hop = await bench_store.bench_floor(args.warmup, args.calls, turn_events)
    echo_apart = await echo_apart_rate(args)
    persist_apart = await _persist_apart(args)
    minimal_apart, bare_apart, ablation, minimal_contract = await _minimal_and_bare(args)
    loop = type(asyncio.get_running_loop()).__module__.split(".")[0]
    return Report(
        args.synchronous,
        loop,
        a,
        raw,
        rates,
        count.per_turn_ms / 1000,
        hop.per_turn_ms / 1000,
        echo_apart,
        persist_apart,
        minimal_apart,
        bare_apart,
        minimal_contract,
        ablation,
    )


@dataclass
class Apart:
    """Calls/s a client in another process measured, and the CPU time this process (the
    server's) spent per call meanwhile: on the event-loop thread and on all its other
    threads (None where ``/proc/self/task`` is not there)."""

    rate: float
    loop_cpu_us: float | None = None
    other_cpu_us: float | None = None

    @staticmethod
    def mean(runs: list[Apart]) -> Apart:
        def avg(values: list[float | None]) -> float | None:
            known = [v for v in values if v is not None]
            return sum(known) / len(known) if len(known) == len(values) else None

        return Apart(
            sum(r.rate for r in runs) / len(runs),
            avg([r.loop_cpu_us for r in runs]),
            avg([r.other_cpu_us for r in runs]),
        )


def thread_cpu_s() -> dict[int, float] | None:
    """CPU seconds (user + system) of each thread of this process, by native id."""
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():
        return None
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[int, float] = {}
    for task in tasks.iterdir():
        try:
            # The fields after the command name (which may hold spaces) in parentheses.
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # the thread ended
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / tick
    return out


async def client_apart(args: argparse.Namespace, kind: str, url: str) -> Apart:
    """What a client in a subprocess of this script measures against ``url``, with this
    process's CPU time per call (warm-up calls included) meanwhile."""
    loop_thread = threading.get_native_id()
    before = thread_cpu_s()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--client", kind, "--url", url, "--calls", str(args.calls),
        "--warmup", str(args.warmup), "--loop", args.loop,
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await proc.communicate()
    after = thread_cpu_s()
    if proc.returncode != 0:
        raise RuntimeError(f"the {kind} client failed (exit {proc.returncode})")
    rate = float(out.decode().split()[-1])
    if before is None or after is None:
        return Apart(rate)
    calls = args.calls + args.warmup
    spent = {tid: cpu - before.get(tid, 0.0) for tid, cpu in after.items()}
    on_loop = spent.pop(loop_thread, 0.0)
    return Apart(rate, 1e6 * on_loop / calls, 1e6 * sum(spent.values()) / calls)


async def echo_apart_rate(args: argparse.Namespace) -> Apart:
    async with serve(_echo, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        return await client_apart(args, "bare", f"ws://127.0.0.1:{port}")


async def _persist_apart(args: argparse.Namespace) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        registry = ActorRegistry(Path(tmp), synchronous=args.synchronous)
        await asyncio.to_thread(get_counter)
        async with registry, SessionServer(registry, port=0) as server:
            return (await client_apart(args, "persist", server.url)).rate


@dataclass(frozen=True)
class Ablation:
    """(b-xr) with parts of the contract taken away: ``unmirrored`` is the server without
    its JSONL mirror, ``plain`` also has requests without idempotency keys."""

    unmirrored: Apart
    plain: Apart


@dataclass(frozen=True)
class MinimalContract:
    """The minimal server with the parts of the contract a ``turn.persist`` must write:
    ``contract`` its idempotency and tool-call rows, ``mirrored`` also the JSONL mirror."""

    contract: Apart
    mirrored: Apart


async def contract_apart(args: argparse.Namespace, contract: bool, mirror: bool) -> Apart:
    """The bare client against a fresh minimal server (``contract``: with the key and
    tool-call rows; ``mirror``: with the JSONL mirror); checks that every event was stored
    (and mirrored)."""
    with tempfile.TemporaryDirectory() as tmp:
        memory = Path(tmp) / "memory" if mirror else None
        db = Path(tmp) / "minimal.sqlite"
        async with minimal_server(
            db, args.synchronous, contract=contract, mirror_dir=memory
        ) as server:
            apart = await client_apart(args, "bare", server.url)
        events = 4 * (args.calls + args.warmup)
        if server.last_seq() != events:
            raise RuntimeError(f"the minimal server stored {server.last_seq()} events")
        if memory is not None:
            lines = sum(1 for p in memory.rglob("*.jsonl") for _ in p.open("rb"))
            if lines < events:
                raise RuntimeError(f"the minimal server mirrored {lines} lines for {events} events")
        return apart


async def ours_apart(args: argparse.Namespace, mirror: bool, keyed: bool) -> Apart:
    """The bare client against a fresh session-server (``mirror`` on or off), its
    requests with idempotency keys or not; checks that every event was stored."""
    with tempfile.TemporaryDirectory() as tmp:
        registry = ActorRegistry(Path(tmp), synchronous=args.synchronous, mirror=mirror)
        async with (
            registry,
            SessionServer(registry, port=0) as ours,
            SessionClient(ours.url, "bench-bare") as client,
        ):
            await client.create_session(session_id="s")
            kind = "bare" if keyed else "bare-unkeyed"
            apart = await client_apart(args, kind, f"{ours.url}/v1/agents/bench-bare")
            stored = (await client.get_session("s"))["last_seq"]
            if stored != 4 * (args.calls + args.warmup):
                raise RuntimeError(f"session-server stored {stored} events (errors?)")
            return apart


async def _minimal_and_bare(
    args: argparse.Namespace, rounds: int = 2
) -> tuple[Apart, Apart, Ablation, MinimalContract]:
    """(m-x), (b-xr), its ablation and (m-xk), (m-xkm), in alternating rounds (the
    machine's speed drifts between runs): the bare client against the minimal server,
    then against ours, ours without the mirror, ours without the mirror nor keys, and the
    minimal server with the contract's rows and then its mirror, ``rounds`` times."""
    minimal: list[Apart] = []
    contract: list[Apart] = []
    mirrored: list[Apart] = []
    bare: list[Apart] = []
    unmirrored: list[Apart] = []
    plain: list[Apart] = []
    for _ in range(rounds):
        with tempfile.TemporaryDirectory() as tmp:
            async with minimal_server(Path(tmp) / "minimal.sqlite", args.synchronous) as server:
                minimal.append(await client_apart(args, "bare", server.url))
                if server.last_seq() != 4 * (args.calls + args.warmup):
                    raise RuntimeError(f"the minimal server stored {server.last_seq()} events")
        bare.append(await ours_apart(args, mirror=True, keyed=True))
        unmirrored.append(await ours_apart(args, mirror=False, keyed=True))
        plain.append(await ours_apart(args, mirror=False, keyed=False))
        contract.append(await contract_apart(args, contract=True, mirror=False))
        mirrored.append(await contract_apart(args, contract=True, mirror=True))
    ablation = Ablation(Apart.mean(unmirrored), Apart.mean(plain))
    full = MinimalContract(Apart.mean(contract), Apart.mean(mirrored))
    return Apart.mean(minimal), Apart.mean(bare), ablation, full


async def client_rate(kind: str, url: str, calls: int, warmup: int) -> float:
    """The client side of the rows with the client in another process: sequential
    calls/s against ``url``, by a bare ``websockets`` client or a ``SessionClient``."""
    if kind in ("bare", "bare-unkeyed"):
        return await _bare_calls(url, calls, warmup, keyed=kind == "bare")
    async with SessionClient(url, "bench-apart") as client:
        return await _sequential_rate(client, calls, warmup)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per measurement")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--agents", type=int, default=16)
    parser.add_argument("--writers", type=int, default=32, help="connections on one agent")
    parser.add_argument("--pipeline", type=int, default=16, help="requests in flight")
    parser.add_argument("--synchronous", choices=["FULL", "NORMAL"], default="NORMAL")
    parser.add_argument(
        "--loop",
        choices=["auto", "asyncio", "uvloop"],
        default="auto",
        help="event loop: auto (uvloop when installed, as `session-server serve`)",
    )
    # The client of (a-x) / (b-x), run by this script in a subprocess.
    parser.add_argument(
        "--client", choices=["bare", "bare-unkeyed", "persist"], help=argparse.SUPPRESS
    )
    parser.add_argument("--url", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def run_with_loop(loop: str, coro: Any) -> Any:
    """Run ``coro`` on the event loop ``session-server serve --loop LOOP`` would use:
    uvloop for ``uvloop`` and for ``auto`` when it is installed, else asyncio's own."""
    factory = _loop_factory(loop)
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.client is not None:
        rate = run_with_loop(args.loop, client_rate(args.client, args.url, args.calls, args.warmup))
        print(f"{rate:.1f}")
        return
    report: Report = run_with_loop(args.loop, measure(args))
    print(
        f"RPC benchmark: synchronous={report.synchronous}, loop={report.loop},"
        f" {args.calls} calls per measurement, token counts: {token_mode()}"
    )
    print("\n".join(report.table(args)))
    print()
    print("\n".join(report.cpu_table()))


if __name__ == "__main__":
    main()
