"""Large events in many sessions against a real ``session-server serve`` subprocess: the
recent-events cache stays within ``--recent-cache-bytes`` and the server's RSS with it.

One agent, 64 sessions (the cache's session limit), each read once (so its window is
cached) and then given 4 events of 256 KiB: 64 MiB of content. Before the byte bound the
cache kept every one of them (each session is under the event cap): RSS grew by 67 MiB.
Now the cache holds at most the budget (8 MiB here): RSS grew by 10.6 MiB, the cache
7.5 MiB of it.
"""

from __future__ import annotations

import asyncio
import re
import urllib.request
from pathlib import Path

from session_server.client import SessionClient
from tests.support.hardening import noise
from tests.support.load import rss_kib
from tests.support.server import ServerProcess

AGENT = "cache-rss"
KIB = 1024
MIB = 1024 * KIB
BUDGET = 8 * MIB
SESSIONS = 64
EVENTS = 4
SIZE = 256 * KIB
# SQLite's page caches, the threads' arenas, websockets' buffers and what the writes
# left mapped (measured: 3 MiB besides the cache).
SLACK = 24 * MIB


def _gauge(url: str, name: str) -> float:
    """A gauge of the server's ``/metrics`` (no tokens configured: no auth needed)."""
    body = urllib.request.urlopen(url.replace("ws://", "http://") + "/metrics").read().decode()
    match = re.search(rf"^{name} (\S+)$", body, re.MULTILINE)
    assert match is not None, name
    return float(match.group(1))


async def test_large_events_in_many_sessions_keep_the_cache_within_its_bytes(
    tmp_path: Path,
) -> None:
    proc = ServerProcess(
        tmp_path / "memory",
        "--recent-cache-bytes",
        str(BUDGET),
        "--synchronous",
        "NORMAL",
        "--no-mirror",
    )
    url = await asyncio.to_thread(proc.start)
    try:
        async with SessionClient(url, AGENT, max_size=None) as client:
            # Warm-up: the token encoding loaded, a large event written and read.
            await client.create_session(session_id="warm")
            await client.append_events("warm", [{"content": noise(SIZE)}])
            await client.build_context("warm", limit=1)
            base = rss_kib(proc.pid)
            for n in range(SESSIONS):
                sid = f"s{n}"
                await client.create_session(session_id=sid)
                await client.build_context(sid)  # its (empty) window is cached now
                for _ in range(EVENTS // 2):
                    batch = [{"content": noise(SIZE)} for _ in range(2)]
                    await client.append_events(sid, batch)
            grown = (rss_kib(proc.pid) - base) * KIB
            held = await asyncio.to_thread(_gauge, url, "session_server_recent_cache_bytes")
            peak = await asyncio.to_thread(_gauge, url, "session_server_recent_cache_bytes_peak")
            # Every session still answers (the newest events from the cache, the rest
            # from the store).
            ctx = await client.build_context("s0")
            assert len(ctx.messages) == EVENTS
        written = SESSIONS * EVENTS * SIZE
        assert 0 < held <= BUDGET
        # A commit adds at most one append (two events) before the budget evicts.
        assert peak <= BUDGET + 2 * (SIZE + 4 * KIB)
        assert grown < BUDGET + SLACK, (
            f"+{grown / MIB:.0f} MiB for {written / MIB:.0f} MiB written; cache "
            f"{held / MIB:.1f} MiB (peak {peak / MIB:.1f})"
        )
        code = await asyncio.to_thread(proc.terminate, 30.0)
    finally:
        proc.kill()
    assert code == 0, proc.stderr_text
