"""Concurrent large frames against a real ``session-server serve`` subprocess: the
server's RSS stays under the documented intake bound (docs/operations.md, "Limits").

Twelve clients each send one frame of nearly the maximum size at once (a scaled version
of issue 13's 12 x 15 MiB: ``--max-frame-bytes`` 4 MiB keeps CI fast; the full size is in
BENCHMARKS.md, ``scripts/bench_hardening.py``). Before the intake bound, websockets held
every frame whole, several copies each, before the request budget applied: +138 MiB
here (+253 MiB with tiktoken counting, whose token lists are counted in pieces now).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.support.hardening import big_frames, prepare_agent
from tests.support.load import rss_kib
from tests.support.server import ServerProcess

AGENT = "intake-rss"
MIB = 1024 * 1024
MAX_FRAME = 4 * MIB
CONNECTIONS = 12
# The defaults of ``SessionServer`` for this frame size: request budget 4 x max frame,
# half of it for large frames -> 2 permits; threshold 1 MiB; one socket read 256 KiB.
PERMITS = 2
THRESHOLD = MIB
READ_CHUNK = 256 * 1024
# What handling one large append may hold besides its frame (the parsed content, the
# encoded row, the mirror line, transient copies): measured about 3.5 x, bound 5 x.
HANDLING_FACTOR = 5
SLACK = 24 * MIB  # threads' stacks, SQLite caches, websockets' per-connection state


def rss_bound() -> int:
    return PERMITS * HANDLING_FACTOR * MAX_FRAME + CONNECTIONS * (THRESHOLD + READ_CHUNK) + SLACK


async def test_concurrent_large_frames_keep_rss_under_the_intake_bound(tmp_path: Path) -> None:
    proc = ServerProcess(tmp_path / "memory", "--max-frame-bytes", str(MAX_FRAME))
    url = await asyncio.to_thread(proc.start)
    try:
        await prepare_agent(url, AGENT, events=2, size=1000)
        base = rss_kib(proc.pid)
        peak, latencies = await big_frames(
            url, AGENT, count=CONNECTIONS, mib=(MAX_FRAME - 64 * 1024) / MIB, pid=proc.pid
        )
        grown = (peak - base) * 1024
        assert len(latencies) == CONNECTIONS  # every append answered
        assert grown < rss_bound(), f"+{grown / MIB:.0f} MiB, bound {rss_bound() / MIB:.0f} MiB"
        code = await asyncio.to_thread(proc.terminate, 30.0)
    finally:
        proc.kill()
    assert code == 0, proc.stderr_text
