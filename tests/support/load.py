"""The load phase shared by the fault suite's load test and ``scripts/bench_all.py``.

``run_load(url, pid, connections=64, agents=16, duration=10.0, rate=None)``:
``connections`` clients over ``agents`` agents (two sessions per agent, ``<tag>-0`` and
``<tag>-1``, each shared by ``connections / (2 * agents)`` clients) persist 4-message turns
for ``duration`` seconds against the server at ``url`` (process ``pid``, for its RSS).

- Closed loop (``rate=None``): every client sends its next turn the moment the last is
  answered. The throughput is the server's saturation rate; by Little's law the mean
  latency is then ``connections / throughput``, whatever the server does.
- Open loop (``rate=R`` turns/s in all): each connection sends on its own schedule, one
  turn every ``connections / R`` seconds from a random phase (seeded). A turn whose slot
  comes while that connection's previous turn is in flight waits for it, and its latency
  is counted from its scheduled time, not from when it was sent: a server that falls
  behind shows it in the latencies (no coordinated omission). Slots are scheduled until
  ``duration``; turns still waiting ``grace`` seconds after that are not sent and are
  counted in ``unsent``.

Returns a ``LoadReport`` with every ``turn.persist`` latency, the errors, the server's RSS
at start and end, and what each session holds afterwards (read back through the server),
so the caller can check seqs.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from session_server.client import SessionClient
from session_server.values.events import ContextMessage, SessionEvent, ToolCall

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
    # Open loop: the offered rate (None: closed loop), the turns scheduled before the end
    # of ``duration``, and those of them never sent (still waiting at the grace deadline).
    offered_per_s: float | None = None
    scheduled: int = 0
    unsent: int = 0

    @property
    def mode(self) -> str:
        return "closed" if self.offered_per_s is None else "open"

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
            mode=self.mode,
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
    rate: float | None = None,
    grace: float = 5.0,
    seed: int = 0,
) -> LoadReport:
    if rate is not None and rate <= 0:
        raise ValueError(f"rate: must be > 0 turns/s, got {rate}")
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
    interval = connections / rate if rate is not None else 0.0
    phases = random.Random(seed)
    # Each connection's first slot, drawn before the clock starts.
    first_slot = [phases.uniform(0, interval) for _ in range(connections)]
    scheduled = 0
    unsent = 0
    rss_start = rss_kib(pid)
    started = time.perf_counter()
    deadline = started + duration

    async def persist(w: int, sid: str, since: float) -> bool:
        """One turn; its latency counted from ``since``. False after an error."""
        n = acked[w] + 1
        try:
            await clients[w].persist_turn(sid, writer_turn(w, n))
        except Exception as exc:
            errors.append(f"writer {w} turn {n}: {exc!r}")
            return False
        latencies.append((time.perf_counter() - since) * 1000)
        acked[w] = n
        return True

    async def closed(w: int) -> None:
        sid = assignment[w][1]
        while time.perf_counter() < deadline:
            if not await persist(w, sid, time.perf_counter()):
                return

    async def open_(w: int) -> None:
        nonlocal scheduled, unsent
        sid = assignment[w][1]
        slot = started + first_slot[w]
        while slot < deadline:
            scheduled += 1
            now = time.perf_counter()
            if now > deadline + grace:  # a backlog the bound cuts: never sent
                unsent += 1
            else:
                if now < slot:  # pacing to the schedule (not synchronisation)
                    await asyncio.sleep(slot - now)
                if not await persist(w, sid, slot):
                    return
            slot += interval

    try:
        await asyncio.gather(*((closed if rate is None else open_)(w) for w in range(connections)))
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
        offered_per_s=rate,
        scheduled=scheduled,
        unsent=unsent,
    )
