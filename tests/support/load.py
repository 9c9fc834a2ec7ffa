"""The load phase shared by the fault suite's load test and ``scripts/bench_all.py``.

``run_load(url, pid, connections=64, agents=16, duration=10.0)``: ``connections`` clients
over ``agents`` agents (two sessions per agent, each shared by ``connections / (2 *
agents)`` clients) persist 4-message turns back to back for ``duration`` seconds (sessions ``<tag>-0`` and ``<tag>-1``) against
the server at ``url`` (process ``pid``, for its RSS). Returns a ``LoadReport`` with every
``turn.persist`` latency, the errors, the server's RSS at start and end, and what each
session holds afterwards (read back through the server), so the caller can check seqs.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from session_server.client import SessionClient
from session_server.core.events import ContextMessage, SessionEvent, ToolCall

__all__ = ["LoadReport", "rss_kib", "run_load", "writer_turn"]


def rss_kib(pid: int) -> int:
    """``VmRSS`` of process ``pid`` from ``/proc/<pid>/status``, in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def writer_turn(writer: int, n: int) -> list[ContextMessage]:
    """Turn ``n`` of writer ``writer``: every message names both, so turns can be checked."""
    tag = f"w{writer}-t{n}"
    call = f"call-{tag}"
    return [
        ContextMessage(role="user", content=f"question {tag}"),
        ContextMessage(
            role="assistant",
            content="",
            tool_calls=[ToolCall(id=call, name="lookup", arguments={"tag": tag})],
        ),
        ContextMessage(role="tool", content=f"result {tag}", tool_call_id=call, name="lookup"),
        ContextMessage(role="assistant", content=f"answer {tag}"),
    ]


@dataclass
class LoadReport:
    connections: int
    agents: int
    duration_s: float
    turns: int
    errors: list[str]
    latencies_ms: list[float] = field(repr=False)
    rss_start_kib: int
    rss_end_kib: int
    # (agent, session) -> events, read back after the load
    stored: dict[tuple[str, str], list[SessionEvent]] = field(repr=False)
    # writer -> (agent, session, acknowledged turn count)
    writers: dict[int, tuple[str, str, int]] = field(repr=False)

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.latencies_ms)

    @property
    def p99_ms(self) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]

    @property
    def turns_per_s(self) -> float:
        return self.turns / self.duration_s

    def summary(self) -> dict[str, Any]:
        out = {
            k: v
            for k, v in asdict(self).items()
            if k not in ("latencies_ms", "stored", "writers", "errors")
        }
        out.update(
            errors=len(self.errors),
            p50_ms=round(self.p50_ms, 2),
            p99_ms=round(self.p99_ms, 2),
            turns_per_s=round(self.turns_per_s, 1),
        )
        return out

    def write_json(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.summary(), indent=2) + "\n")


async def run_load(
    url: str,
    pid: int,
    *,
    connections: int = 64,
    agents: int = 16,
    duration: float = 10.0,
    tag: str = "load",
) -> LoadReport:
    agent_ids = [f"load-agent-{i:02d}" for i in range(agents)]
    sessions: list[tuple[str, str]] = []
    for agent in agent_ids:
        async with SessionClient(url, agent) as client:
            for k in range(2):
                sessions.append((agent, await client.create_session(session_id=f"{tag}-{k}")))
    assignment = {w: sessions[w % len(sessions)] for w in range(connections)}
    latencies: list[float] = []
    errors: list[str] = []
    acked: dict[int, int] = dict.fromkeys(range(connections), 0)
    clients = [SessionClient(url, assignment[w][0]) for w in range(connections)]
    await asyncio.gather(*(c.connect() for c in clients))
    rss_start = rss_kib(pid)
    started = time.perf_counter()
    deadline = started + duration

    async def write(w: int) -> None:
        sid = assignment[w][1]
        client = clients[w]
        while time.perf_counter() < deadline:
            n = acked[w] + 1
            t0 = time.perf_counter()
            try:
                await client.persist_turn(sid, writer_turn(w, n))
            except Exception as exc:
                errors.append(f"writer {w} turn {n}: {exc!r}")
                return
            latencies.append((time.perf_counter() - t0) * 1000)
            acked[w] = n

    try:
        await asyncio.gather(*(write(w) for w in range(connections)))
        elapsed = time.perf_counter() - started
        rss_end = rss_kib(pid)
    finally:
        await asyncio.gather(*(c.close() for c in clients))
    stored: dict[tuple[str, str], list[SessionEvent]] = {}
    for agent, sid in sessions:
        async with SessionClient(url, agent) as client:
            stored[(agent, sid)] = await client.load_events(sid, limit=None)
    return LoadReport(
        connections=connections,
        agents=agents,
        duration_s=elapsed,
        turns=len(latencies),
        errors=errors,
        latencies_ms=latencies,
        rss_start_kib=rss_start,
        rss_end_kib=rss_end,
        stored=stored,
        writers={w: (*assignment[w], acked[w]) for w in range(connections)},
    )
