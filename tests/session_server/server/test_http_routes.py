"""Plain HTTP on the RPC port: the page's files, /healthz and /metrics, on a real server."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from session_server.client import SessionClient
from session_server.compaction.summarize import SummaryRequest, SummaryResult
from session_server.server.http_routes import CONTENT_SECURITY_POLICY, memory_dir_writable
from session_server.values.errors import InternalError
from tests.support.plain_http import http_get
from tests.support.server import RunningServer, running_server, turn_messages

TOKEN = "inspector-test-token"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "memory") as running:
        yield running


async def until(condition: Callable[[], bool]) -> None:
    """Wait for a condition of the server's state, polled for at most 10 s: websockets
    signals no event when it accepts a connection."""
    async with asyncio.timeout(10):
        while not condition():  # noqa: ASYNC110
            await asyncio.sleep(0.005)


async def test_page_and_assets_are_served_with_a_strict_policy(server: RunningServer) -> None:
    page = await http_get(server.url, "/")
    assert page.status == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "<title>Memory Inspector" in page.body
    # Every file the page names is served from this origin: nothing comes from elsewhere.
    refs = re.findall(r'(?:src|href)="([^"]+)"', page.body)
    assert refs and all(r.startswith(("/static/", "#", "data:")) for r in refs), refs
    for ref in (r for r in refs if r.startswith("/static/")):
        asset = await http_get(server.url, ref)
        assert asset.status == 200, ref
        assert asset.headers["x-content-type-options"] == "nosniff"
    script = await http_get(server.url, "/static/inspector.js")
    assert script.headers["content-type"].startswith("text/javascript")
    assert "http://" not in script.body and "https://" not in script.body
    for bad in ("/static/../server.py", "/static/missing.js", "/static/index.html"):
        assert (await http_get(server.url, bad)).status == 404, bad


async def test_healthz_reports_ok_while_serving(server: RunningServer) -> None:
    answer = await http_get(server.url, "/healthz")
    assert answer.status == 200
    assert answer.headers["content-type"] == "application/json"
    body = json.loads(answer.body)
    assert body["status"] == "ok"
    assert body["auth_required"] is False
    assert body["open_connections"] == 0


async def test_healthz_is_503_while_shutting_down(tmp_path: Path) -> None:
    async with running_server(tmp_path / "memory") as running:
        host, port = running.url.removeprefix("ws://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        # Accepted before the stop: its request is read after the stop began.
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: test\r\n")
        await writer.drain()
        await until(lambda: len(running.server.gate.pending) == 1)
        stopping = asyncio.create_task(running.server.stop())
        await until(lambda: running.server.stopping)
        writer.write(b"\r\n")
        raw = await asyncio.wait_for(reader.read(), 30)
        writer.close()
        await stopping
    assert raw.startswith(b"HTTP/1.1 503")
    assert json.loads(raw.partition(b"\r\n\r\n")[2]) == {"status": "shutting_down"}


def test_memory_dir_writable(tmp_path: Path) -> None:
    assert memory_dir_writable(tmp_path)
    assert memory_dir_writable(tmp_path / "not" / "yet" / "there")
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert not memory_dir_writable(blocker / "memory")


async def test_healthz_is_503_when_the_memory_dir_cannot_be_written(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    async with running_server(memory) as running:
        assert (await http_get(running.url, "/healthz")).status == 200
        # The memory dir replaced by a file (running as root, permissions would not stop
        # a write): nothing can be written there any more.
        memory.rename(tmp_path / "moved")
        memory.write_text("not a folder")
        try:
            answer = await http_get(running.url, "/healthz")
        finally:
            memory.unlink()
            (tmp_path / "moved").rename(memory)
    assert answer.status == 503
    assert json.loads(answer.body) == {
        "status": "unavailable",
        "reason": "the memory dir is not writable",
    }


async def test_with_tokens_the_page_and_health_are_open_and_metrics_are_not(
    tmp_path: Path,
) -> None:
    async with running_server(tmp_path / "memory", tokens=[TOKEN]) as running:
        assert (await http_get(running.url, "/")).status == 200
        health = await http_get(running.url, "/healthz")
        assert json.loads(health.body)["auth_required"] is True
        assert (await http_get(running.url, "/metrics")).status == 401
        scraped = await http_get(running.url, "/metrics", {"Authorization": f"Bearer {TOKEN}"})
        assert scraped.status == 200


def sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text (labels in any order)."""
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        metric, _, label_text = head.partition("{")
        found = dict(re.findall(r'(\w+)="([^"]*)"', label_text))
        if metric == name and found == labels:
            return float(value)
    raise AssertionError(f"no sample {name}{labels}")


async def test_metrics_count_requests_connections_commits_and_mirror(
    server: RunningServer,
) -> None:
    async with SessionClient(server.url, "metrics agent") as client:
        sid = await client.create_session()
        for n in range(1, 4):
            await client.persist_turn(sid, turn_messages(n))
        await client.call("memory.view", {"session_id": sid})  # drains the mirror
        with pytest.raises(Exception, match="Method not found"):
            await client.call("no.such.method", {})
        with pytest.raises(Exception, match="params"):
            await client.call("session.get", {})
        text = (await http_get(server.url, "/metrics")).body
        assert sample(text, "session_server_open_connections") == 1.0
    assert sample(text, "session_server_requests_total", method="turn.persist", code="ok") == 3
    assert sample(text, "session_server_requests_total", method="unknown", code="-32601") == 1
    assert sample(text, "session_server_requests_total", method="session.get", code="-32602") == 1
    assert sample(text, "session_server_request_seconds_count", method="turn.persist") == 3
    assert sample(text, "session_server_request_seconds_bucket", method="turn.persist", le="+Inf")
    assert sample(text, "session_server_open_agents") == 1.0
    # session.create and three persists: four commits, each carrying one write.
    assert sample(text, "session_server_commit_seconds_count") == 4
    assert sample(text, "session_server_commit_batch_size_count") == 4
    assert sample(text, "session_server_commit_batch_size_sum") == 4
    assert sample(text, "session_server_mirror_lag_seconds_count") >= 1
    assert sample(text, "session_server_summarizer_failures_total") == 0
    assert "# TYPE session_server_memory_compactions_total counter" in text
    after = (await http_get(server.url, "/metrics")).body
    assert sample(after, "session_server_open_connections") == 0.0


class FailingSummarizer:
    name = "failing"

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        raise RuntimeError("provider down")


async def test_summarizer_failures_are_counted(tmp_path: Path) -> None:
    async with running_server(
        tmp_path / "memory", registry_options={"summarizer": FailingSummarizer()}
    ) as running:
        async with SessionClient(running.url, "summaries") as client:
            sid = await client.create_session()
            for n in range(1, 5):
                await client.persist_turn(sid, turn_messages(n))
            with pytest.raises(InternalError):
                await client.call(
                    "memory.compact",
                    {"session_id": sid, "strategy": {"mode": "summarize", "raw_tail_turns": 1}},
                )
        text = (await http_get(running.url, "/metrics")).body
    assert sample(text, "session_server_summarizer_failures_total") == 1
    assert (
        sample(text, "session_server_requests_total", method="memory.compact", code="-32603") == 1
    )
