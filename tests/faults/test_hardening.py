"""Boundary findings of issue 13 against a real ``session-server serve`` subprocess.

- SIGTERM while a client pipelines requests and never reads its answers: the process
  exits 0 within the stop bound (it used to run for good).
- The descriptor limit: under ``ulimit -n 256`` (soft = hard, so it cannot be raised),
  40 agents all work (the open-agent bound is derived from the limit; it used to fail
  with "database file is unusable"), and connections beyond the derived maximum are
  refused with HTTP 503 and a single log line, never a traceback.
- No secret in the log at DEBUG: tokens given by file, presented by header and by
  subprotocol, never appear on stderr.
- Memory: a non-reading pipeliner and a non-reading subscriber keep the server's RSS
  under a bound (figures for the issue are in BENCHMARKS.md, ``scripts/bench_hardening.py``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from session_server.client import SessionClient
from tests.support.hardening import (
    non_reading_pipeliner,
    non_reading_subscriber,
    prepare_agent,
)
from tests.support.load import rss_kib
from tests.support.server import ServerProcess, turn_messages

AGENT = "hardening-agent"


def limited(proc: ServerProcess, nofile: int) -> ServerProcess:
    """Run ``proc`` under ``ulimit -n nofile`` (soft and hard)."""
    proc.argv = ["sh", "-c", f'ulimit -n {nofile} && exec "$@"', "sh", *proc.argv]
    return proc


async def test_sigterm_finishes_within_the_bound_whatever_the_client(tmp_path: Path) -> None:
    proc = ServerProcess(tmp_path / "memory", "--stop-timeout", "3")
    url = await asyncio.to_thread(proc.start)
    try:
        await prepare_agent(url, AGENT, events=20, size=20_000)
        stop_pipelining = asyncio.Event()
        sent = asyncio.Event()
        pipeliner = asyncio.create_task(
            non_reading_pipeliner(url, AGENT, requests=3000, stop=stop_pipelining, sent=sent)
        )
        async with asyncio.timeout(60):
            await sent.wait()  # 3000 answers of 400 kB: far more than anything buffers
        assert proc.proc is not None
        started = time.monotonic()
        proc.proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 30.0)
        elapsed = time.monotonic() - started
        stop_pipelining.set()
        await pipeliner
    finally:
        proc.kill()
    assert code == 0, proc.stderr_text
    assert elapsed < 3 + 2.0, f"stop took {elapsed:.1f}s"


async def test_low_descriptor_limit_agents_and_connections(tmp_path: Path) -> None:
    proc = limited(ServerProcess(tmp_path / "memory", "--log-level", "INFO"), 256)
    url = await asyncio.to_thread(proc.start)
    try:

        async def agent_work(i: int) -> None:
            async with SessionClient(url, f"fd-agent-{i}") as client:
                sid = await client.create_session(session_id="s")
                await client.persist_turn(sid, turn_messages(i))
                assert len(await client.load_events(sid)) == 4

        for start in range(0, 40, 10):  # 10 agents at a time, 40 in all
            await asyncio.gather(*(agent_work(i) for i in range(start, start + 10)))

        held = []
        refused = 0
        for _ in range(140):
            try:
                held.append(await connect(f"{url}/v1/agents/{AGENT}"))
            except InvalidStatus as exc:
                assert exc.response.status_code == 503
                refused += 1
        for ws in held:
            await ws.close()
        assert refused > 0, "no connection maximum under ulimit -n 256"
        # Room again once they are gone, for a new agent too.
        async with SessionClient(url, "fd-agent-late") as client:
            await client.create_session(session_id="s")
        code = await asyncio.to_thread(proc.terminate, 30.0)
    finally:
        proc.kill()
    assert code == 0, proc.stderr_text
    assert "Traceback" not in proc.stderr_text
    assert "unusable" not in proc.stderr_text
    assert 1 <= proc.stderr_text.count("refusing connections") <= 2


async def test_no_token_in_the_debug_log(tmp_path: Path) -> None:
    secret = "s3cr3t-" + os.urandom(8).hex()
    token_file = tmp_path / "tokens"
    token_file.write_text(f"# the server's tokens\n{secret}\n")
    proc = ServerProcess(
        tmp_path / "memory", "--token-file", str(token_file), "--log-level", "DEBUG"
    )
    url = await asyncio.to_thread(proc.start)
    try:
        async with SessionClient(url, AGENT, token=secret) as client:
            await client.create_session(session_id="s")
        async with connect(
            f"{url}/v1/agents/{AGENT}", subprotocols=["jsonrpc", f"bearer.{secret}"]
        ) as ws:
            await ws.send('{"jsonrpc": "2.0", "id": 1, "method": "session.list"}')
            assert "sessions" in await ws.recv()
        with pytest.raises(InvalidStatus):
            await connect(
                f"{url}/v1/agents/{AGENT}",
                additional_headers={"Authorization": f"Bearer {secret}-wrong"},
            )
        code = await asyncio.to_thread(proc.terminate, 30.0)
    finally:
        proc.kill()
    assert code == 0
    assert "Authorization" in proc.stderr_text  # DEBUG really logged the headers
    assert secret not in proc.stderr_text
    assert secret not in " ".join(proc.argv)


async def test_non_reading_clients_keep_rss_bounded(tmp_path: Path) -> None:
    """2,000 pipelined 400 kB answers never read, and 40 MB appended to a session whose
    subscriber never reads: the server grows by less than the bound below (it grew
    without limit before: 4.9 GiB for the pipeliner, 81 MiB per subscriber)."""
    bound_mib = 200
    proc = ServerProcess(tmp_path / "memory")
    url = await asyncio.to_thread(proc.start)
    try:
        await prepare_agent(url, AGENT, events=20, size=20_000)
        base = rss_kib(proc.pid)
        peak = await non_reading_pipeliner(url, AGENT, requests=2000, pid=proc.pid)
        assert (peak - base) / 1024 < bound_mib, f"pipeliner: +{(peak - base) / 1024:.0f} MiB"
        base = rss_kib(proc.pid)
        report = await non_reading_subscriber(url, AGENT, megabytes=40, pid=proc.pid, subscribers=1)
        grown = (report.peak_kib - base) / 1024
        assert grown < bound_mib, f"subscriber: +{grown:.0f} MiB"
        assert report.appends * 256 * 1024 >= 40_000_000
        code = await asyncio.to_thread(proc.terminate, 30.0)
    finally:
        proc.kill()
    assert code == 0, proc.stderr_text
