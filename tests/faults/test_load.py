"""Load: 64 connections over 16 agents against a server subprocess for a bounded time.

Two sessions per agent, each written by two connections at once. Checks: no error; every
session's seqs are 1..N with N = 4 x the turns acknowledged on it; each turn's 4 events
are contiguous and come from one writer (no interleaving inside a turn); each writer's
turns are all there, in order. The p50/p99 latency of ``turn.persist`` and the server's RSS
(``/proc/<pid>/status``) at start and end are printed and written to
``build/load_report.json`` (read by ``scripts/bench_all.py``); the end RSS must stay within
200 MiB of the start.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from tests.support.load import run_load, writer_turn
from tests.support.server import ROOT, ServerProcess

DURATION_S = 10.0
RSS_BOUND_KIB = 200 * 1024
REPORT = ROOT / "build" / "load_report.json"
_TAG = re.compile(r"^question w(\d+)-t(\d+)$")


def test_64_connections_16_agents(tmp_path: Path, soak: int) -> None:
    server = ServerProcess(tmp_path / "memory")
    server.start()
    try:
        assert server.proc is not None
        report = asyncio.run(run_load(server.url, server.proc.pid, duration=DURATION_S * soak))
        assert server.terminate() == 0
    finally:
        server.kill()
    assert report.errors == []
    assert report.turns > 0
    per_session: dict[tuple[str, str], int] = {}
    for agent, sid, turns in report.writers.values():
        per_session[(agent, sid)] = per_session.get((agent, sid), 0) + turns
    for key, events in report.stored.items():
        assert [e.seq for e in events] == list(range(1, 4 * per_session[key] + 1)), key
        seen: dict[int, int] = {}
        for i in range(0, len(events), 4):
            match = _TAG.match(events[i].content)
            assert match, (key, events[i])
            writer, n = int(match.group(1)), int(match.group(2))
            expected = writer_turn(writer, n)
            assert [e.content for e in events[i : i + 4]] == [m.content for m in expected]
            assert n == seen.get(writer, 0) + 1, f"{key}: writer {writer} turn {n} out of order"
            seen[writer] = n
        for writer, (agent, sid, turns) in report.writers.items():
            if (agent, sid) == key:
                assert seen.get(writer, 0) == turns, (key, writer)
    report.write_json(REPORT)
    print(
        f"\nload: {report.connections} connections, {report.agents} agents, "
        f"{report.duration_s:.1f} s, {report.turns} turns ({report.turns_per_s:.0f}/s), "
        f"turn.persist p50 {report.p50_ms:.1f} ms p99 {report.p99_ms:.1f} ms, "
        f"server RSS {report.rss_start_kib / 1024:.1f} -> {report.rss_end_kib / 1024:.1f} MiB"
    )
    assert report.rss_end_kib < report.rss_start_kib + RSS_BOUND_KIB
