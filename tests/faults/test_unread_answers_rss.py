"""Clients that never read their answers, against a real ``session-server serve``
subprocess: the server's RSS stays within the unread-answer bound and another client is
answered meanwhile (issue 33, finding 4).

Three raw sockets each send 64 ``events.load`` calls whose answers are about 15 MB (the
whole session, under the default 16 MiB answer bound) and never ``recv()``. Before the
bound, each connection could hold its whole in-flight window of such answers: +944 MiB
for one client, 2.7 GB for three, and another client waited 20.7 s.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.support.hardening import Probe, prepare_agent, unread_answers
from tests.support.load import rss_kib
from tests.support.server import ServerProcess

AGENT = "unread-answers"
MIB = 1024 * 1024
CLIENTS = 3
REQUESTS = 64
BOUND_MIB = 300  # issue 33: +300 MiB at most with three such clients
PROBE_MAX_S = 1.0


async def test_non_reading_clients_stay_within_the_answer_bound(tmp_path: Path) -> None:
    proc = ServerProcess(tmp_path / "memory")
    url = await asyncio.to_thread(proc.start)
    try:
        await prepare_agent(url, AGENT, events=15, size=1_000_000)  # ~15 MB per load
        base = rss_kib(proc.pid)
        with Probe(url) as probe:
            peak = await unread_answers(
                url,
                AGENT,
                clients=CLIENTS,
                requests=REQUESTS,
                pid=proc.pid,
                ceiling_kib=base + BOUND_MIB * 1024,
            )
        grown = (peak - base) / 1024
        assert grown < BOUND_MIB, f"+{grown:.0f} MiB with {CLIENTS} non-reading clients"
        assert probe.latencies, "the probe made no call"
        slowest = max(probe.latencies)
        assert slowest < PROBE_MAX_S, f"another client waited {slowest:.2f} s"
        code = await asyncio.to_thread(proc.terminate, 30.0)
    finally:
        proc.kill()
    assert code == 0, proc.stderr_text
