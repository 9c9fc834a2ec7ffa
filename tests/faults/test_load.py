"""Load: 64 connections over 16 agents against a server subprocess for a bounded time.

Two sessions per agent, each written by two connections at once. Checks: no error; every
session's seqs are 1..N with N = 4 x the turns acknowledged on it; each turn's 4 events
are contiguous and come from one writer (no interleaving inside a turn); each writer's
turns are all there, in order. The p50/p99 latency of ``turn.persist`` and the server's RSS
(``/proc/<pid>/status``) at start and end are printed and written to
``build/load_report.json``; the end RSS must stay within 200 MiB of the start.

The closed loop (each client sends its next turn when the last is answered) runs 10 s; an
open-loop case (a fixed offered rate, each connection on its own schedule, latency from the
scheduled time) runs 3 s at a rate far below saturation, with the same integrity checks
and every scheduled turn either acknowledged or counted unsent.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from tests.support.load import LoadReport, run_load, writer_turn
from tests.support.server import ROOT, ServerProcess

DURATION_S = 10.0
RSS_BOUND_KIB = 200 * 1024
REPORT = ROOT / "build" / "load_report.json"
_TAG = re.compile(r"^question w(\d+)-t(\d+)$")


OPEN_DURATION_S = 3.0
OPEN_RATE = 128.0  # 2 turns/s per connection: a fraction of the closed-loop rate


def _load(tmp_path: Path, **options: float) -> LoadReport:
    server = ServerProcess(tmp_path / "memory")
    server.start()
    try:
        report = asyncio.run(run_load(server.url, server.pid, **options))
        assert server.terminate() == 0
    finally:
        server.kill()
    return report


def test_64_connections_16_agents(tmp_path: Path, soak: int) -> None:
    report = _load(tmp_path, duration=DURATION_S * soak)
    check_turns(report)
    report.write_json(REPORT)
    print(
        f"\nload: {report.connections} connections, {report.agents} agents, "
        f"{report.duration_s:.1f} s, {report.turns} turns ({report.turns_per_s:.0f}/s), "
        f"turn.persist p50 {report.p50_ms:.1f} ms p99 {report.p99_ms:.1f} ms, "
        f"server RSS {report.rss_start_kib / 1024:.1f} -> {report.rss_end_kib / 1024:.1f} MiB"
    )
    assert report.rss_end_kib < report.rss_start_kib + RSS_BOUND_KIB


def test_open_loop_64_connections(tmp_path: Path, soak: int) -> None:
    report = _load(tmp_path, duration=OPEN_DURATION_S * soak, rate=OPEN_RATE)
    check_turns(report)
    assert report.mode == "open" and report.offered_per_s == OPEN_RATE
    # Every connection has a slot in each of its intervals (0.5 s), from a random phase.
    expected = OPEN_RATE * OPEN_DURATION_S * soak
    assert expected - report.connections <= report.scheduled <= expected + report.connections
    assert report.turns + report.unsent == report.scheduled
    print(
        f"\nopen-loop load: offered {OPEN_RATE:.0f}/s, {report.turns} of {report.scheduled}"
        f" scheduled turns acknowledged ({report.unsent} unsent), p50 {report.p50_ms:.1f} ms"
        f" p99 {report.p99_ms:.1f} ms from the scheduled times"
    )


def check_turns(report: LoadReport) -> None:
    """No error; seqs contiguous per session; each turn whole, from one writer, in order."""
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
