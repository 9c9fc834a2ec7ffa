"""Store benchmark: per-turn cost of the session-server store against its baselines.

Run: ``.venv/bin/python scripts/bench_store.py [--turns N] [--synchronous FULL|NORMAL]
[--agents [N]]``. One run measures, on fresh files in a temporary directory, with the same
turn shape (user message, assistant tool call, tool result, assistant answer) and the same
``synchronous`` level, WAL everywhere:

(a) raw ``sqlite3`` with the store's own schema (``schema_sql()``) and WAL checkpoint size:
    per turn, a read of the last 50 events and one ``BEGIN IMMEDIATE`` transaction
    inserting the 4 event rows and updating the session row. This is the physical limit.
(b) this store: ``build_working_context(limit=50)`` then ``persist_working_context`` of the
    4 new messages (with an idempotency key, as an RPC client sends one; ``--no-idempotency``
    drops it).
(c) the OpenAI Agents SDK ``SQLiteSession`` (file-backed): ``get_items(limit=50)`` then
    ``add_items`` of the same 4 items as Responses-style dicts. The SDK already puts its
    file in WAL mode (``_configure_connection``) but leaves ``synchronous`` at SQLite's
    default (FULL); a subclass overrides ``_configure_connection`` to also set the chosen
    ``synchronous`` level on every connection it opens (it opens one per worker thread).

Then the cost of ``build_working_context(limit=50)`` with 1k and 100k events of history
(each in its own agent file, filled with ``append_events`` in large batches) and, with
``--agents N`` (10000 when no N is given), the activation of N new agents through one
registry with ``max_open=256``: open SQLite file descriptors, RSS, and the cold activation
latency (``create_session`` on an agent never seen before).

The concurrent phase (``--writers``, 32) runs 32 writers on one agent (ours) and on one
file (``SQLiteSession``) against our sequential rate; at FULL it also runs ours at
``synchronous=OFF`` (no flush at all): the CPU ceiling of the same work on this machine.

``--flush-delay-ms MS [MS ...]`` runs, instead, sequential FULL (a)/(b)/(c) and the
concurrent writers with every ``fsync``/``fdatasync`` slowed by MS: for each value this
script runs again in a subprocess with ``scripts/flush_delay.c`` preloaded (``LD_PRELOAD``,
built with gcc into a temporary folder; the report says why when gcc is missing), which
first checks the shim is active (every one of 20 raw FULL commits takes at least MS).
A flush on this VM costs a few tenths of a ms; on common disks 1-10 ms, which is where
group commit pays. Example: ``scripts/bench_store.py --flush-delay-ms 1 4 --turns 300
--warmup 20 --rounds 2 --concurrent-turns 20``.

Progress bars (tqdm, on stderr) only show on a terminal. The markdown table at the end goes
to stdout only.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import platform
import pstats
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from bench_rpc import run_with_loop
from tqdm import tqdm

from session_server.concurrency.worker_threads import WorkerThreads
from session_server.runtime.registry import ActorRegistry
from session_server.storage.schema import SCHEMA_VERSION, schema_sql
from session_server.storage.sqlite_open import wal_autocheckpoint_pages
from session_server.values.codec import message_to_event, new_event_ids
from session_server.values.events import ContextMessage, SessionEvent, ToolCall
from session_server.values.tokens import count_events
from tests.support.bench_env import token_mode, use_shared_tiktoken
from tests.support.flush_shim import (
    ShimUnavailable,
    build_shim,
    raw_full_commit_times,
    shim_env,
)

use_shared_tiktoken()

T = TypeVar("T")

SYSTEM = ["You are a helpful assistant running inside a benchmark."]
WINDOW = 50
TOOL = "search_docs"
_USER = (
    "Question {n}: which of the stored documents mentions the quarterly figures for the "
    "northern region, and what was the change against the previous quarter? Please cite."
)
_RESULT = (
    "Result {n}: "
    + "document q3-north.md line 12: revenue 1.24M (+3.1% q/q); line 40: churn 2.2%. " * 6
)
_ANSWER = (
    "Answer {n}: the quarterly report for the northern region (q3-north.md) gives revenue "
    "of 1.24M, up 3.1% on the previous quarter, with churn at 2.2%. Source: line 12 and 40."
)


# -- helpers -----------------------------------------------------------------------------


def bar(iterable: Iterable[T], total: int, desc: str) -> Iterable[T]:
    return tqdm(
        iterable,
        total=total,
        desc=desc,
        file=sys.stderr,
        disable=not sys.stderr.isatty(),
        leave=False,
        unit="it",
    )


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def fmt_rate(per_s: float) -> str:
    return f"{per_s:,.0f}"


def sqlite_fds() -> int:
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if target.endswith((".sqlite", "-wal", "-shm")):
            count += 1
    return count


def proc_status(key: str) -> str:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return line.split(":", 1)[1].strip()
    return "?"


def rss_mib() -> float:
    return int(proc_status("VmRSS").split()[0]) / 1024


class Timing:
    """Per-turn durations of one phase."""

    def __init__(self, name: str, durations: list[float], wall: float | None = None) -> None:
        self.name = name
        self.durations = durations
        # Sequential phases: the sum of the turns; concurrent ones: the wall time.
        self.total = sum(durations) if wall is None else wall

    @property
    def per_turn_ms(self) -> float:
        """Mean cost of a turn (wall time / turns for a concurrent phase)."""
        return 1000 * self.total / len(self.durations)

    @property
    def turns_per_s(self) -> float:
        return len(self.durations) / self.total

    @property
    def p50_ms(self) -> float:
        return 1000 * pct(self.durations, 0.50)

    @property
    def p99_ms(self) -> float:
        return 1000 * pct(self.durations, 0.99)


# -- the turn, in each system's shape ------------------------------------------------------


def turn_messages(n: int) -> list[ContextMessage]:
    call_id = f"call_{n}"
    return [
        ContextMessage(role="user", content=_USER.format(n=n)),
        ContextMessage(
            role="assistant",
            content="",
            tool_calls=[ToolCall(id=call_id, name=TOOL, arguments={"query": "q3 north", "n": n})],
        ),
        ContextMessage(role="tool", content=_RESULT.format(n=n), tool_call_id=call_id, name=TOOL),
        ContextMessage(role="assistant", content=_ANSWER.format(n=n)),
    ]


def turn_events(n: int) -> list[SessionEvent]:
    """The same turn as events (for bulk ``append_events``)."""
    return [message_to_event("", m) for m in turn_messages(n)]


def turn_items(n: int) -> list[dict[str, Any]]:
    """The same turn as OpenAI Responses input items (what the Agents SDK stores)."""
    call_id = f"call_{n}"
    return [
        {"role": "user", "content": _USER.format(n=n)},
        {
            "type": "function_call",
            "call_id": call_id,
            "name": TOOL,
            "arguments": json.dumps({"query": "q3 north", "n": n}),
        },
        {"type": "function_call_output", "call_id": call_id, "output": _RESULT.format(n=n)},
        {
            "id": f"msg_{n}",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": _ANSWER.format(n=n), "annotations": []}],
        },
    ]


def raw_rows(session_id: str, n: int, first_seq: int, now: int) -> list[tuple[Any, ...]]:
    """The 4 event rows of turn ``n`` in the store's row format (metadata as the codec writes it)."""
    call_id = f"call_{n}"
    call = [{"id": call_id, "name": TOOL, "arguments": {"query": "q3 north", "n": n}}]
    payloads: list[tuple[str, str, str | None]] = [
        ("user_message", _USER.format(n=n), None),
        ("tool_call_request", "", json.dumps({"toolCalls": call}, separators=(",", ":"))),
        (
            "tool_result",
            _RESULT.format(n=n),
            json.dumps(
                {"toolCallId": call_id, "toolName": TOOL, "isSuccess": True},
                separators=(",", ":"),
            ),
        ),
        ("agent_message", _ANSWER.format(n=n), None),
    ]
    # Event ids as the store makes them (time-ordered UUIDs): the same rows, the same index.
    ids = new_event_ids(len(payloads))
    return [
        (ids[i], session_id, first_seq + i, action, content, meta, now, n, first_seq, 0)
        for i, (action, content, meta) in enumerate(payloads)
    ]


# -- (a) raw sqlite3 -----------------------------------------------------------------------

_COLS = (
    "id, session_id, seq, action, content, metadata, created_at, turn, turn_start_seq, token_count"
)


def bench_raw(path: Path, synchronous: str, warmup: int, turns: int) -> Timing:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA busy_timeout=5000")
    conn.execute(f"PRAGMA wal_autocheckpoint={wal_autocheckpoint_pages(synchronous)}")  # as ours
    conn.executescript(schema_sql())
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    sid = "raw-session"
    now = time.time_ns() // 1_000_000
    conn.execute(
        "INSERT INTO sessions (id, agent_id, created_at, updated_at) VALUES (?, 'raw', ?, ?)",
        (sid, now, now),
    )
    insert = f"INSERT INTO events ({_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
    durations: list[float] = []
    last_seq = 0
    for n in bar(range(1, warmup + turns + 1), warmup + turns, "(a) raw sqlite3"):
        t0 = time.perf_counter()
        rows = conn.execute(
            f"SELECT {_COLS} FROM events WHERE session_id = ? ORDER BY seq DESC LIMIT ?",
            (sid, WINDOW),
        ).fetchall()
        rows.reverse()
        now = time.time_ns() // 1_000_000
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(insert, raw_rows(sid, n, last_seq + 1, now))
        last_seq += 4
        conn.execute(
            "UPDATE sessions SET last_seq = ?, last_turn = ?, last_turn_start_seq = ?,"
            " updated_at = ? WHERE id = ?",
            (last_seq, n, last_seq - 3, now, sid),
        )
        conn.execute("COMMIT")
        if n > warmup:
            durations.append(time.perf_counter() - t0)
    conn.close()
    return Timing("(a) raw sqlite3", durations)


# -- (b) this store --------------------------------------------------------------------------


async def bench_store(
    memory_dir: Path,
    synchronous: str,
    warmup: int,
    turns: int,
    idempotency: bool,
    profile: Path | None,
    mirror: bool = False,
) -> Timing:
    async with ActorRegistry(memory_dir, synchronous=synchronous, mirror=mirror) as reg:  # type: ignore[arg-type]
        actor = await reg.get("bench-store")
        sid = await actor.create_session()
        durations: list[float] = []
        profiler = cProfile.Profile() if profile is not None else None
        for n in bar(range(1, warmup + turns + 1), warmup + turns, "(b) session-server"):
            if profiler is not None and n == warmup + 1:
                profiler.enable()
            t0 = time.perf_counter()
            ctx = await actor.build_working_context(sid, system_instructions=SYSTEM, limit=WINDOW)
            ctx.add_messages(turn_messages(n))
            await actor.persist_working_context(
                sid, ctx, idempotency_key=f"turn-{n}" if idempotency else None
            )
            if n > warmup:
                durations.append(time.perf_counter() - t0)
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(profile)
            stats = pstats.Stats(profiler, stream=sys.stderr)
            stats.sort_stats("tottime").print_stats(30)
        # Sanity: everything is there and the window is the expected size.
        events = await actor.load_events(sid, limit=None, tail=False)
        assert len(events) == 4 * (warmup + turns), len(events)
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        ctx = await actor.build_working_context(sid, limit=WINDOW)
        # The window moves to a turn boundary rather than split a tool call from its result.
        assert WINDOW <= len(ctx.messages) < WINDOW + 4, len(ctx.messages)
    return Timing("(b) session-server", durations)


# -- (c) OpenAI Agents SDK SQLiteSession --------------------------------------------------------


def sdk_session_class(synchronous: str) -> type[Any]:
    from agents import SQLiteSession

    class BenchSQLiteSession(SQLiteSession):  # type: ignore[misc]
        """SQLiteSession whose connections also get ``PRAGMA synchronous``.

        The SDK configures every connection it opens (the schema one and one per worker
        thread of ``asyncio.to_thread``) through the static ``_configure_connection``,
        which sets WAL; this adds the benchmark's synchronous level after it.
        """

        @staticmethod
        def _configure_connection(conn: sqlite3.Connection) -> None:
            SQLiteSession._configure_connection(conn)
            conn.execute(f"PRAGMA synchronous={synchronous}")

    return BenchSQLiteSession


async def bench_sdk(path: Path, synchronous: str, warmup: int, turns: int) -> Timing:
    session = sdk_session_class(synchronous)("bench-sdk", db_path=path)
    try:
        durations: list[float] = []
        for n in bar(range(1, warmup + turns + 1), warmup + turns, "(c) Agents SDK"):
            t0 = time.perf_counter()
            history = await session.get_items(limit=WINDOW)
            assert len(history) == min(WINDOW, 4 * (n - 1))
            await session.add_items(turn_items(n))
            if n > warmup:
                durations.append(time.perf_counter() - t0)
        items = await session.get_items()
        assert len(items) == 4 * (warmup + turns)
        # Check the pragmas really hold on a connection the SDK uses.
        conn = session._get_connection()
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        level = conn.execute("PRAGMA synchronous").fetchone()[0]
        assert mode == "wal" and level == {"FULL": 2, "NORMAL": 1}[synchronous], (mode, level)
    finally:
        session.close()
    return Timing("(c) Agents SDK SQLiteSession", durations)


# -- (f) the floor of a store that counts tokens and commits off the event loop ---------------


async def bench_floor(
    warmup: int, turns: int, events_of: Callable[[int], list[SessionEvent]] | None = None
) -> tuple[Timing, Timing]:
    """The two costs a turn of (b) has that (a) does not, and that (b) cannot drop: the
    token count of the turn's 4 messages (``values.tokens.count_events``, tiktoken) and one
    round trip to a worker thread and back (the commit runs off the event loop:
    ``WorkerThreads.run`` of a no-op on a pool like the registry's). Measured turn by turn
    in the same rounds as (a), (b) and (c). ``events_of(n)``: turn ``n`` as events (this
    benchmark's turn by default; ``bench_rpc`` counts its own, smaller one)."""
    events_of = turn_events if events_of is None else events_of
    counts: list[float] = []
    hops: list[float] = []
    with WorkerThreads(max_workers=2, thread_name_prefix="bench-floor") as pool:
        for n in range(1, warmup + turns + 1):
            events = events_of(n)
            t0 = time.perf_counter()
            count_events(events)
            t1 = time.perf_counter()
            await pool.run(int)
            t2 = time.perf_counter()
            if n > warmup:
                counts.append(t1 - t0)
                hops.append(t2 - t1)
    return Timing("token count of the turn", counts), Timing("worker round trip", hops)


def floor_timing(raw: Timing, count: Timing, hop: Timing) -> Timing:
    """(f) = (a) + count + hop, turn by turn (the three lists are as long)."""
    durations = [
        a + c + h for a, c, h in zip(raw.durations, count.durations, hop.durations, strict=True)
    ]
    return Timing("(f) floor: (a) + token count + worker round trip", durations)


# -- history size ---------------------------------------------------------------------------


COMPACT = {"mode": "compact", "compact_keep": 2, "compact_trigger_turns": 4}


async def bench_history(
    memory_dir: Path,
    synchronous: str,
    sizes: list[int],
    reps: int,
    strategy: dict[str, Any] | None = None,
) -> dict[int, list[float]]:
    out: dict[int, list[float]] = {}
    async with ActorRegistry(memory_dir, synchronous=synchronous) as reg:  # type: ignore[arg-type]
        sessions: dict[int, tuple[Any, str]] = {}
        for size in sizes:
            actor = await reg.get(f"history-{size}")
            sid = await actor.create_session()
            batch_turns = 1000
            n_turns = size // 4
            for start in bar(
                range(0, n_turns, batch_turns),
                (n_turns + batch_turns - 1) // batch_turns,
                f"fill {size:,} events",
            ):
                batch = [
                    e
                    for n in range(start + 1, min(n_turns, start + batch_turns) + 1)
                    for e in turn_events(n)
                ]
                await actor.append_events(sid, batch)
            sessions[size] = (actor, sid)
        kw: dict[str, Any] = {"system_instructions": SYSTEM, "limit": WINDOW, "strategy": strategy}
        for size, (actor, sid) in sessions.items():
            ctx = await actor.build_working_context(sid, **kw)
            if strategy is None:
                assert ctx.base_seq == size and WINDOW <= len(ctx.messages) < WINDOW + 4, ctx
            else:  # the first build appended one compaction event, then placeholders apply
                assert any(m.compacted for m in ctx.messages), ctx
            for _ in range(20):  # warm-up
                await actor.build_working_context(sid, **kw)
            durations = []
            label = "build_working_context" + (" (compact)" if strategy else "")
            for _ in bar(range(reps), reps, f"{label} @ {size:,}"):
                t0 = time.perf_counter()
                await actor.build_working_context(sid, **kw)
                durations.append(time.perf_counter() - t0)
            out[size] = durations
    return out


# -- many agents -----------------------------------------------------------------------------


async def bench_agents(memory_dir: Path, synchronous: str, n_agents: int) -> dict[str, Any]:
    fds_start, rss_start = sqlite_fds(), rss_mib()
    threads_start = proc_status("Threads")
    latencies: list[float] = []
    fds_peak = 0
    async with ActorRegistry(memory_dir, synchronous=synchronous, max_open=256) as reg:  # type: ignore[arg-type]
        for i in bar(range(n_agents), n_agents, "agents"):
            actor = await reg.get(f"agent-{i:06d}")
            t0 = time.perf_counter()
            await actor.create_session()
            latencies.append(time.perf_counter() - t0)
            if i % 128 == 0:
                fds_peak = max(fds_peak, sqlite_fds())
        fds_end, rss_end = sqlite_fds(), rss_mib()
        fds_peak = max(fds_peak, fds_end)
        open_end = reg.open_count
        threads_end = proc_status("Threads")
    return {
        "agents": n_agents,
        "fds_start": fds_start,
        "fds_peak": fds_peak,
        "fds_end": fds_end,
        "open_end": open_end,
        "rss_start": rss_start,
        "rss_end": rss_end,
        "rss_closed": rss_mib(),
        "threads_start": threads_start,
        "threads_end": threads_end,
        "p50_ms": 1000 * pct(latencies, 0.50),
        "p99_ms": 1000 * pct(latencies, 0.99),
    }


# -- concurrency: N writers on one agent ------------------------------------------------------


async def bench_store_concurrent(
    memory_dir: Path, synchronous: str, writers: int, warmup: int, turns: int
) -> Timing:
    """``writers`` tasks, one session each, on one agent: build + persist back to back.

    The Timing holds one duration per turn (its latency); the rate is turns over the
    wall time of the timed phase (``Timing.wall``), not the sum of the latencies.
    ``synchronous="OFF"`` (no flush at all: the CPU ceiling of the same work) is set on
    the registry after its check, which admits FULL and NORMAL only (a server never runs
    without flushes); the writer connection's level is read back at the end.
    """
    level = "NORMAL" if synchronous == "OFF" else synchronous
    async with ActorRegistry(memory_dir, synchronous=level, mirror=False) as reg:  # type: ignore[arg-type]
        reg.synchronous = synchronous  # type: ignore[assignment]
        actor = await reg.get("bench-concurrent")
        sids = [await actor.create_session() for _ in range(writers)]
        durations: list[float] = []

        async def write(w: int, first: int, count: int, timed: bool) -> None:
            sid = sids[w]
            for n in range(first, first + count):
                t0 = time.perf_counter()
                ctx = await actor.build_working_context(
                    sid, system_instructions=SYSTEM, limit=WINDOW
                )
                ctx.add_messages(turn_messages(n))
                await actor.persist_working_context(sid, ctx, idempotency_key=f"w{w}-t{n}")
                if timed:
                    durations.append(time.perf_counter() - t0)

        await asyncio.gather(*(write(w, 1, warmup, False) for w in range(writers)))
        start = time.perf_counter()
        await asyncio.gather(*(write(w, warmup + 1, turns, True) for w in range(writers)))
        wall = time.perf_counter() - start
        for sid in sids:  # every turn there, seqs contiguous
            events = await actor.load_events(sid, limit=None, tail=False)
            assert [e.seq for e in events] == list(range(1, 4 * (warmup + turns) + 1))
        store = actor._store
        assert store is not None
        level_read = store.writer.execute("PRAGMA synchronous").fetchone()[0]
        assert level_read == {"OFF": 0, "NORMAL": 1, "FULL": 2}[synchronous], level_read
    return Timing(f"(b) session-server, {writers} writers", durations, wall=wall)


async def bench_sdk_concurrent(
    path: Path, synchronous: str, writers: int, warmup: int, turns: int
) -> Timing:
    """The same load on ``SQLiteSession``: ``writers`` sessions of one file."""
    cls = sdk_session_class(synchronous)
    sessions = [cls(f"bench-sdk-{w}", db_path=path) for w in range(writers)]
    durations: list[float] = []
    try:

        async def write(w: int, first: int, count: int, timed: bool) -> None:
            session = sessions[w]
            for n in range(first, first + count):
                t0 = time.perf_counter()
                await session.get_items(limit=WINDOW)
                await session.add_items(turn_items(n))
                if timed:
                    durations.append(time.perf_counter() - t0)

        await asyncio.gather(*(write(w, 1, warmup, False) for w in range(writers)))
        start = time.perf_counter()
        await asyncio.gather(*(write(w, warmup + 1, turns, True) for w in range(writers)))
        wall = time.perf_counter() - start
        for session in sessions:
            assert len(await session.get_items()) == 4 * (warmup + turns)
    finally:
        for session in sessions:
            session.close()
    return Timing(f"(c) Agents SDK SQLiteSession, {writers} writers", durations, wall=wall)


# -- many agents: turns/s, activation, open files, RSS -------------------------------------------


async def bench_agent_counts(
    memory_dir: Path, synchronous: str, agents: int, writers: int, turns: int
) -> dict[str, Any]:
    """``agents`` agents written by ``max(writers, agents)`` concurrent writers (one
    session each, spread evenly): the cold activation of each agent (first call: open,
    migrate, create a session), then the turns/s of the writers, open files and RSS."""
    n_writers = max(writers, agents)
    fds_start, rss_start = sqlite_fds(), rss_mib()
    activation: list[float] = []
    async with ActorRegistry(memory_dir, synchronous=synchronous, mirror=False) as reg:  # type: ignore[arg-type]
        actors = []
        for i in range(agents):
            t0 = time.perf_counter()
            actor = await reg.get(f"agent-{i:04d}")
            await actor.create_session(session_id="s-0")
            activation.append(time.perf_counter() - t0)
            actors.append(actor)
        slots = []
        for w in range(n_writers):
            actor = actors[w % agents]
            sid = "s-0" if w < agents else await actor.create_session()
            slots.append((actor, sid))

        async def write(actor: Any, sid: str, w: int) -> None:
            for n in range(1, turns + 1):
                ctx = await actor.build_working_context(
                    sid, system_instructions=SYSTEM, limit=WINDOW
                )
                ctx.add_messages(turn_messages(n))
                await actor.persist_working_context(sid, ctx, idempotency_key=f"w{w}-t{n}")

        start = time.perf_counter()
        await asyncio.gather(*(write(a, s, w) for w, (a, s) in enumerate(slots)))
        wall = time.perf_counter() - start
        fds_end, rss_end = sqlite_fds(), rss_mib()
    return {
        "agents": agents,
        "writers": n_writers,
        "turns": n_writers * turns,
        "turns_per_s": n_writers * turns / wall,
        "activation_p50_ms": 1000 * pct(activation, 0.5),
        "activation_p99_ms": 1000 * pct(activation, 0.99),
        "fds_start": fds_start,
        "fds_end": fds_end,
        "rss_start": rss_start,
        "rss_end": rss_end,
    }


# -- main ------------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "yes" if ok else "**no**"


def timing_rows(timings: Iterable[Timing]) -> list[str]:
    lines = [
        "| measure | turns/s | ms/turn (mean) | p50 ms | p99 ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for t in timings:
        lines.append(
            f"| {t.name} | {fmt_rate(t.turns_per_s)} | {t.per_turn_ms:.3f} |"
            f" {t.p50_ms:.3f} | {t.p99_ms:.3f} |"
        )
    return lines


async def sequential_section(
    args: argparse.Namespace, root: Path, sync: str, *, mirror: bool = True
) -> tuple[list[str], Timing]:
    """The table of (a), (b), (b+m) (unless not ``mirror``), (c) and the floor (f), and
    (b)'s Timing."""
    # The disk's fsync cost drifts over a run (virtual disk); the systems take turns in
    # short rounds, each on fresh files, so every one sees the same conditions.
    rounds = max(1, args.rounds)
    per_round = max(1, args.turns // rounds)
    idem = not args.no_idempotency
    parts: dict[str, list[Timing]] = {
        "raw": [],
        "store": [],
        "mirrored": [],
        "sdk": [],
        "count": [],
        "hop": [],
    }
    for r in range(rounds):
        d = root / f"seq-{sync}-{r}"
        d.mkdir()
        parts["raw"].append(bench_raw(d / "raw.sqlite", sync, args.warmup, per_round))
        profile = args.profile if r == 0 and sync == args.synchronous[0] else None
        parts["store"].append(
            await bench_store(d / "store", sync, args.warmup, per_round, idem, profile)
        )
        if mirror:
            parts["mirrored"].append(
                await bench_store(d / "mirrored", sync, args.warmup, per_round, idem, None, True)
            )
        parts["sdk"].append(await bench_sdk(d / "sdk.sqlite", sync, args.warmup, per_round))
        count, hop = await bench_floor(args.warmup, per_round)
        parts["count"].append(count)
        parts["hop"].append(hop)

    def joined(key: str, name: str) -> Timing:
        return Timing(name, [x for t in parts[key] for x in t.durations])

    raw = joined("raw", "(a) raw sqlite3")
    store = joined("store", "(b) session-server")
    sdk = joined("sdk", "(c) Agents SDK SQLiteSession")
    count, hop = joined("count", "token count"), joined("hop", "worker round trip")
    floor = floor_timing(raw, count, hop)
    f_over_a = floor.per_turn_ms / raw.per_turn_ms
    b_over_a = store.per_turn_ms / raw.per_turn_ms
    c_over_b = sdk.per_turn_ms / store.per_turn_ms
    systems = [raw, store, sdk, floor]
    ratios = [
        f"| cost (b)/(a): store vs raw sqlite3 | {b_over_a:.2f}x"
        f" | {store.p50_ms / raw.p50_ms:.2f}x | <= 1.3x | {verdict(b_over_a <= 1.3)} |",
        f"| floor (f)/(a): the least (b)/(a) can be | {f_over_a:.2f}x"
        f" | {floor.p50_ms / raw.p50_ms:.2f}x | <= 1.3x | {verdict(f_over_a <= 1.3)} |",
        f"| speed (b) vs (c): cost (c)/(b) | {c_over_b:.2f}x"
        f" | {sdk.p50_ms / store.p50_ms:.2f}x | > 1x | {verdict(c_over_b > 1)} |",
    ]
    if mirror:
        mirrored = joined("mirrored", "(b+m) session-server with JSONL mirror")
        systems.insert(2, mirrored)
        m_over_b = mirrored.per_turn_ms / store.per_turn_ms
        ratios.append(
            f"| mirror overhead: cost (b+m)/(b) | {m_over_b:.2f}x"
            f" | {mirrored.p50_ms / store.p50_ms:.2f}x | <= 1.25x | {verdict(m_over_b <= 1.25)} |"
        )
    lines = [
        f"### Sequential, synchronous={sync}",
        "",
        f"{args.turns} turns per system in {rounds} alternating rounds (+{args.warmup} warm-up"
        f" each), {'with' if idem else 'without'} idempotency keys.",
        "",
        *timing_rows(systems),
        "",
        f"(f) adds to each turn of (a) the two costs (b) has and cannot drop, measured in the"
        f" same rounds: the token count of the turn (mean {1000 * count.per_turn_ms:.0f} us)"
        f" and one worker-thread round trip for the commit (mean"
        f" {1000 * hop.per_turn_ms:.0f} us). (f)/(a) = {f_over_a:.2f}x is the least (b)/(a)"
        " can be.",
        "",
        "| ratio | value (means) | value (p50s) | target | met (means) |",
        "|---|---:|---:|---:|:---:|",
        *ratios,
    ]
    return lines, store


async def concurrent_section(
    args: argparse.Namespace, root: Path, sync: str, sequential: Timing, *, ceiling: bool = False
) -> list[str]:
    """32 writers on one agent (ours) vs on one file (SQLiteSession) vs our ``sequential``
    rate; with ``ceiling``, also ours at ``synchronous=OFF``: the same work with no flush,
    the rate this CPU allows (alternating with the others, round by round)."""
    writers, turns = args.writers, args.concurrent_turns
    warmup = max(1, args.warmup // 10)
    ours: list[Timing] = []
    sdks: list[Timing] = []
    offs: list[Timing] = []
    for r in range(max(1, args.rounds // 2)):
        d = root / f"conc-{sync}-{r}"
        d.mkdir()
        ours.append(await bench_store_concurrent(d / "store", sync, writers, warmup, turns))
        sdks.append(await bench_sdk_concurrent(d / "sdk.sqlite", sync, writers, warmup, turns))
        if ceiling:
            offs.append(await bench_store_concurrent(d / "off", "OFF", writers, warmup, turns))

    def joined(parts: list[Timing], name: str) -> Timing:
        return Timing(
            name, [x for t in parts for x in t.durations], wall=sum(t.total for t in parts)
        )

    store = joined(ours, f"(b) session-server, {writers} writers on one agent")
    sdk = joined(sdks, f"(c) Agents SDK SQLiteSession, {writers} writers on one file")
    vs_sdk = store.turns_per_s / sdk.turns_per_s
    vs_seq = store.turns_per_s / sequential.turns_per_s
    rows = [sequential, store, sdk]
    ratios = [
        f"| {writers} writers: ours / SQLiteSession (turns/s) | {vs_sdk:.2f}x | >= 3x"
        f" | {verdict(vs_sdk >= 3)} |",
        f"| {writers} writers / our sequential (turns/s) | {vs_seq:.2f}x | >= 4x"
        f" | {verdict(vs_seq >= 4)} |",
    ]
    if ceiling:
        off = joined(offs, f"(b) session-server, {writers} writers, synchronous=OFF (no flush)")
        rows.append(off)
        ratios.append(
            f"| {writers} writers: {sync} / OFF (turns/s; 1.00x = at the CPU ceiling,"
            f" flushes cost nothing more) | {store.turns_per_s / off.turns_per_s:.2f}x"
            " | (reported) | |"
        )
    return [
        f"### {writers} concurrent writers, one session each, synchronous={sync}",
        "",
        f"{turns} turns per writer (+{warmup} warm-up), build + persist as above; turns/s over"
        " the wall time, ms/turn = wall time / turns; p50/p99 are per-turn latencies.",
        "",
        *timing_rows(rows),
        "",
        "| ratio | value | target | met |",
        "|---|---:|---:|:---:|",
        *ratios,
    ]


# -- flush latency emulation ------------------------------------------------------------------

FLUSH_CHECK_COMMITS = 20


def flush_delay_report(args: argparse.Namespace) -> str:
    """``--flush-delay-ms``: for each delay, this script again in a subprocess with the
    flush shim preloaded (``scripts/flush_delay.c``, built with gcc into a temporary
    folder), which runs the FULL phases (``flush_delay_section``); their tables, joined.
    Without gcc the report is one line saying why the section was skipped."""
    forwarded = [
        *("--turns", str(args.turns), "--warmup", str(args.warmup)),
        *("--rounds", str(args.rounds), "--writers", str(args.writers)),
        *("--concurrent-turns", str(args.concurrent_turns), "--loop", args.loop),
        *(["--no-idempotency"] if args.no_idempotency else []),
        *(["--dir", str(args.dir)] if args.dir is not None else []),
    ]
    with tempfile.TemporaryDirectory(prefix="flush_shim_") as tmp:
        try:
            shim = build_shim(Path(tmp))
        except ShimUnavailable as exc:
            return f"Flush-latency emulation skipped: {exc}."
        parts = []
        for ms in args.flush_delay_ms:
            argv = [sys.executable, __file__, *forwarded, "--flush-delay-child", str(ms)]
            print(f"flush delay {ms} ms: {' '.join(argv[1:])}", file=sys.stderr, flush=True)
            done = subprocess.run(
                argv,
                env=shim_env(shim, round(ms * 1000)),
                stdout=subprocess.PIPE,
                text=True,
                check=True,
            )
            parts.append(done.stdout.strip())
    return "\n\n".join(parts)


async def flush_delay_section(args: argparse.Namespace, root: Path) -> list[str]:
    """In the process under the shim: check it is active (each of a few raw FULL commits
    takes at least the delay), then sequential FULL (a)/(b)/(c) and the concurrent writers
    (ours, SQLiteSession, against our sequential (b) of the same run)."""
    ms: float = args.flush_delay_child
    check = await asyncio.to_thread(
        raw_full_commit_times, root / "flush-check.sqlite", FLUSH_CHECK_COMMITS
    )
    if min(check) < ms / 1000:
        raise SystemExit(
            f"the flush shim is not active: a raw FULL commit took {min(check) * 1000:.3f} ms"
            f" < the {ms} ms delay (LD_PRELOAD={os.environ.get('LD_PRELOAD')!r})"
        )
    seq_lines, store = await sequential_section(args, root, "FULL", mirror=False)
    seq_lines[0] = f"#### {seq_lines[0].removeprefix('### ')}, each flush +{ms:g} ms"
    lines = [
        f"### Each flush +{ms:g} ms (synchronous=FULL)",
        "",
        f"Shim check: {FLUSH_CHECK_COMMITS} raw sqlite3 FULL commits under it took"
        f" {min(check) * 1000:.2f} ms at least, {pct(check, 0.5) * 1000:.2f} ms p50"
        f" (each >= the {ms:g} ms delay: the shim is active).",
        "",
        *seq_lines,
    ]
    if args.writers:
        seq = Timing("(b) session-server, sequential (1 writer)", store.durations)
        conc = await concurrent_section(args, root, "FULL", seq)
        conc[0] = f"#### {conc[0].removeprefix('### ')}, each flush +{ms:g} ms"
        lines += ["", *conc]
    return lines


async def run(args: argparse.Namespace, root: Path) -> str:
    if args.flush_delay_child is not None:
        return "\n".join(await flush_delay_section(args, root))
    levels: list[str] = args.synchronous
    lines = [store_header()]
    for sync in levels:
        lines += ["", *(await sequential_section(args, root, sync))[0]]
        if args.writers:
            # Our own sequential rate, measured again next to the concurrent phases.
            d = root / f"conc-seq-{sync}"
            d.mkdir()
            seq = await bench_store(d, sync, args.warmup, args.concurrent_turns * 4, True, None)
            seq.name = "(b) session-server, sequential (1 writer)"
            conc = await concurrent_section(args, root, sync, seq, ceiling=sync == "FULL")
            lines += ["", *conc]
    sync = levels[0]
    if args.agent_counts:
        lines += [
            "",
            f"### Many agents, synchronous={sync}",
            "",
            f"max(agents, {args.writers or 32}) concurrent writers (one session each, spread"
            f" over the agents), {args.agent_turns} turns each; activation = the first call"
            " on a new agent (open, migrate, create a session), one agent at a time.",
            "",
            "| agents | writers | turns/s | activation p50 ms | p99 ms | open sqlite fds"
            " | RSS MiB start / end |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for count in args.agent_counts:
            r = await bench_agent_counts(
                root / f"agents-{count}", sync, count, args.writers or 32, args.agent_turns
            )
            lines.append(
                f"| {count} | {r['writers']} | {fmt_rate(r['turns_per_s'])}"
                f" | {r['activation_p50_ms']:.2f} | {r['activation_p99_ms']:.2f}"
                f" | {r['fds_end']} | {r['rss_start']:.0f} / {r['rss_end']:.0f} |"
            )
    if args.history_reps:
        lines += ["", *await history_section(args, root, sync)]
    if args.agents:
        agents = await bench_agents(root / "agents", sync, args.agents)
        lines += [
            "",
            f"| {agents['agents']:,} agents, one registry, max_open=256 | start | end |",
            "|---|---:|---:|",
            f"| open .sqlite/-wal/-shm fds (peak {agents['fds_peak']}) |"
            f" {agents['fds_start']} | {agents['fds_end']} |",
            f"| open stores | 0 | {agents['open_end']} |",
            f"| RSS MiB (after close: {agents['rss_closed']:.0f}) |"
            f" {agents['rss_start']:.0f} | {agents['rss_end']:.0f} |",
            f"| threads | {agents['threads_start']} | {agents['threads_end']} |",
            f"| cold activation (create_session on a new agent) | p50 {agents['p50_ms']:.2f} ms"
            f" | p99 {agents['p99_ms']:.2f} ms |",
        ]
    return "\n".join(lines)


async def history_section(args: argparse.Namespace, root: Path, sync: str) -> list[str]:
    sizes = [args.small_history, args.large_history]
    history = await bench_history(root / "history", sync, sizes, args.history_reps)
    compacted = await bench_history(
        root / "history-compact", sync, sizes, args.history_reps, strategy=COMPACT
    )
    small, large = history[args.small_history], history[args.large_history]
    h_ratio = statistics.mean(large) / statistics.mean(small)
    lines = [
        f"### History size, synchronous={sync}",
        "",
        "| build_working_context(limit=50) | mean ms | p50 ms | p99 ms |",
        "|---|---:|---:|---:|",
    ]
    for size, d in ((args.small_history, small), (args.large_history, large)):
        lines.append(
            f"| {size:,} events of history | {1000 * statistics.mean(d):.3f} |"
            f" {1000 * pct(d, 0.5):.3f} | {1000 * pct(d, 0.99):.3f} |"
        )
    for size in sizes:
        d = compacted[size]
        lines.append(
            f"| {size:,} events, compact strategy ({COMPACT}) | {1000 * statistics.mean(d):.3f} |"
            f" {1000 * pct(d, 0.5):.3f} | {1000 * pct(d, 0.99):.3f} |"
        )
    c_ratio = statistics.mean(compacted[args.large_history]) / statistics.mean(
        compacted[args.small_history]
    )
    lines += [
        f"| @ {args.large_history:,} / @ {args.small_history:,} events (target <= 1.5x)"
        f" | {h_ratio:.2f}x {verdict(h_ratio <= 1.5)} | | |",
        f"| compact strategy: @ {args.large_history:,} / @ {args.small_history:,}"
        f" | {c_ratio:.2f}x | | |",
    ]
    return lines


def store_header() -> str:
    loop = type(asyncio.get_running_loop()).__module__.split(".")[0]
    return (
        f"Store benchmark: WAL, turns of 4 events, window {WINDOW}; SQLite"
        f" {sqlite3.sqlite_version}, Python {platform.python_version()}, {os.cpu_count()} CPUs,"
        f" event loop {loop} (every system runs on it); token counts: {token_mode()}"
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--turns", type=int, default=2000, help="timed turns per system (2000)")
    p.add_argument("--warmup", type=int, default=50, help="untimed turns first (50)")
    p.add_argument(
        "--rounds", type=int, default=4, help="systems take turns in this many rounds (4)"
    )
    p.add_argument(
        "--synchronous",
        choices=["FULL", "NORMAL"],
        nargs="+",
        default=["FULL", "NORMAL"],
        help="levels to measure, each with its own baselines (FULL NORMAL)",
    )
    p.add_argument(
        "--writers", type=int, default=32, help="concurrent writers on one agent (32; 0: skip)"
    )
    p.add_argument("--concurrent-turns", type=int, default=50, help="turns per writer (50)")
    p.add_argument(
        "--agent-counts",
        type=int,
        nargs="*",
        default=[1, 16, 256],
        help="many-agents phase: these agent counts (1 16 256; none: skip)",
    )
    p.add_argument("--agent-turns", type=int, default=10, help="turns per writer there (10)")
    p.add_argument(
        "--agents",
        type=int,
        nargs="?",
        const=10_000,
        default=0,
        help="also activate N new agents (10000 when N is omitted; off by default)",
    )
    p.add_argument("--small-history", type=int, default=1_000)
    p.add_argument("--large-history", type=int, default=100_000)
    p.add_argument("--history-reps", type=int, default=500, help="0: skip the history phase")
    p.add_argument("--no-idempotency", action="store_true", help="(b) without idempotency keys")
    p.add_argument("--dir", type=Path, default=None, help="where the temporary files go")
    p.add_argument("--keep", action="store_true", help="keep the temporary files")
    p.add_argument("--profile", type=Path, default=None, help="cProfile (b) into this file")
    p.add_argument(
        "--loop",
        choices=["auto", "asyncio", "uvloop"],
        default="auto",
        help="event loop for every system: auto (uvloop when installed, as the server)",
    )
    p.add_argument(
        "--flush-delay-ms",
        type=float,
        nargs="+",
        default=None,
        metavar="MS",
        help="instead of the phases above: sequential FULL (a)/(b)/(c) and the concurrent"
        " writers with every fsync/fdatasync slowed by MS (one subprocess per value under"
        " the LD_PRELOAD shim scripts/flush_delay.c, built with gcc; skipped without gcc)",
    )
    p.add_argument("--flush-delay-child", type=float, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.dir is not None:
        args.dir.mkdir(parents=True, exist_ok=True)
    if args.flush_delay_ms and args.flush_delay_child is None:
        header = run_with_loop(args.loop, _async_header())
        print(f"{header}; flush-latency emulation\n\n{flush_delay_report(args)}")
        return
    root = Path(tempfile.mkdtemp(prefix="bench_store_", dir=args.dir))
    try:
        table = run_with_loop(args.loop, run(args, root))
    finally:
        if args.keep:
            print(f"files kept in {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(table)


async def _async_header() -> str:
    return store_header()


if __name__ == "__main__":
    main()
