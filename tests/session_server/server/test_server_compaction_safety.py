"""Compaction that fails safe and triggers that always fire (issue 12, items 3 to 5).

Real servers on 127.0.0.1, the real ``SessionClient``, and for the summarizer outage the
real ``openai`` SDK against a local HTTP server (``tests/support/openai_server.py``) that
refuses connections, hangs, or answers garbage.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from session_server.client import SessionClient
from session_server.mirror.snapshot import SNAPSHOT_FILE
from session_server.runtime.summarizers import OpenAISummarizer
from session_server.values.events import ContextMessage, ToolCall
from tests.support.openai_server import FakeOpenAIServer, default_reply
from tests.support.server import RunningServer, running_server

SUMMARIZE = {"mode": "summarize", "raw_tail_turns": 2, "max_context_tokens": 2000}
FAST = {"compaction_wait": 0.3, "compaction_timeout": 1.0, "summary_backoff": 0.05}


def turn(i: int, size: int = 60) -> list[ContextMessage]:
    """One turn of about ``size * 5`` tokens: a question, a tool call and result, an answer."""
    call = ToolCall(id=f"c{i}", name="search", arguments={"q": f"topic {i}"})
    return [
        ContextMessage(role="user", content=f"question {i} " + "word " * size),
        ContextMessage(role="assistant", tool_calls=[call]),
        ContextMessage(role="tool", tool_call_id=f"c{i}", name="search", content="hit " * size),
        ContextMessage(role="assistant", content=f"answer {i} " + "more " * size),
    ]


def summary_reply(path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any] | str]:
    """A chat completion whose content is a valid JSON summary."""
    status, payload = default_reply(path, body)
    if isinstance(payload, dict) and "choices" in payload:
        content = {
            "summary": "The user asked about several topics.",
            "facts": [{"fact": "The user researches topics.", "confidence": 0.8}],
        }
        payload["choices"][0]["message"]["content"] = json.dumps(content)
    return status, payload


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "memory", registry_options=FAST) as running:
        yield running


async def compactions(client: SessionClient, sid: str) -> int:
    return len(await client.load_events(sid, limit=None, actions=["compaction"]))


# -- triggers that always fire ------------------------------------------------------------


async def test_a_strategy_passed_with_persist_is_honoured_by_the_pressure_check(
    server: RunningServer,
) -> None:
    async with SessionClient(server.url, "bot") as client:
        sid = await client.create_session()
        for i in range(20):
            ctx = await client.build_context(sid, strategy=SUMMARIZE)
            ctx.add_messages(turn(i))
            usage = {"prompt_tokens": ctx.token_count or 0}
            await client.persist_context(sid, ctx, usage=usage, strategy=SUMMARIZE)
        final = await client.build_context(sid, strategy=SUMMARIZE)
        assert await compactions(client, sid) >= 1
        assert final.token_count is not None and final.token_count < 2000
        assert "[MEMORY:EPISODIC]" in final.system_instructions[-1]


async def test_without_usage_the_servers_own_count_triggers(server: RunningServer) -> None:
    async with SessionClient(server.url, "bot") as client:
        sid = await client.create_session()
        await client.call("memory.set_strategy", {"session_id": sid, "strategy": SUMMARIZE})
        flagged = []
        for i in range(10):
            flagged.append((await client.persist_turn(sid, turn(i))).compaction_required)
        assert any(flagged)  # the context went over budget: the server saw it
        final = await client.build_context(sid)
        assert await compactions(client, sid) >= 1
        assert final.token_count is not None and final.token_count < 2000


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": 1900},  # OpenAI Chat Completions
        {"input_tokens": 1900, "output_tokens": 5},  # OpenAI Responses
        # Anthropic with prompt caching: most of the prompt is in the cache counts.
        {"input_tokens": 12, "cache_read_input_tokens": 1500, "cache_creation_input_tokens": 400},
    ],
    ids=["chat", "responses", "anthropic-cached"],
)
async def test_usage_is_read_for_every_provider_shape(
    server: RunningServer, usage: dict[str, int]
) -> None:
    async with SessionClient(server.url, "bot") as client:
        sid = await client.create_session()
        await client.call("memory.set_strategy", {"session_id": sid, "strategy": SUMMARIZE})
        for i in range(3):  # small turns: no pressure from the server's own count
            assert not (await client.persist_turn(sid, turn(i, size=2))).compaction_required
        result = await client.persist_turn(sid, turn(3, size=2), usage=usage)
        assert result.compaction_required


async def test_a_compaction_that_gains_nothing_is_not_repeated(
    server: RunningServer, caplog: pytest.LogCaptureFixture
) -> None:
    # Every turn stays in the raw tail: a summary has nothing to take, however big.
    strategy = {**SUMMARIZE, "raw_tail_turns": 3, "max_context_tokens": 1000}
    caplog.set_level(logging.WARNING, logger="session_server")
    async with SessionClient(server.url, "bot") as client:
        sid = await client.create_session()
        await client.call("memory.set_strategy", {"session_id": sid, "strategy": strategy})
        for i in range(3):  # over budget from the first turn, but nothing to summarise
            assert not (await client.persist_turn(sid, turn(i, size=250))).compaction_required
            await client.build_context(sid)
        metrics = server.registry.metrics
        assert metrics.summary_problems()["futile"] == 1  # the reason, recorded once
        notes = [r.getMessage() for r in caplog.records if "no compaction" in r.getMessage()]
        assert len(notes) == 1 and "raw_tail_turns=3" in notes[0]
        assert await compactions(client, sid) == 0
        # The fourth turn pushes one out of the raw tail: now a summary gains something.
        assert (await client.persist_turn(sid, turn(3, size=250))).compaction_required
        await client.build_context(sid)
        assert await compactions(client, sid) == 1


async def test_the_snapshot_is_written_at_the_end_of_every_turn(server: RunningServer) -> None:
    async with SessionClient(server.url, "bot") as client:
        sid = await client.create_session()
        actor = await server.registry.get("bot")
        path = actor.mirror.session_dir(sid) / SNAPSHOT_FILE
        for i in range(2):  # no context.build first
            result = await client.persist_turn(sid, turn(i, size=2))
            await actor.mirror.drain()
            snapshot = json.loads(path.read_text(encoding="utf-8"))
            assert snapshot["last_seq"] == result.last_seq


# -- the summarizer outage ----------------------------------------------------------------


def _refused_url() -> str:
    """A 127.0.0.1 URL where nothing listens (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


class Outage:
    """What the fake provider does: ``hang`` until released, ``garbage``, or answer."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.release = threading.Event()

    def reply(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any] | str]:
        if self.mode == "hang":
            self.release.wait(30)
            return 503, {"error": {"message": "released", "type": "server_error"}}
        if self.mode == "garbage":
            return 200, "<html>this is not JSON</html>"
        if self.mode == "bad-summary":
            status, payload = default_reply(path, body)  # content "ok": not a JSON summary
            return status, payload
        return summary_reply(path, body)


@pytest.fixture(params=["refuse", "hang", "garbage", "bad-summary"])
def outage(request: pytest.FixtureRequest) -> Iterator[tuple[str, Outage]]:
    state = Outage(request.param)
    if request.param == "refuse":
        yield _refused_url(), state
        return
    with FakeOpenAIServer(state.reply) as fake:
        yield fake.base_url, state
        state.release.set()


async def test_a_summarizer_outage_never_takes_the_agent_down(
    tmp_path: Path, outage: tuple[str, Outage], caplog: pytest.LogCaptureFixture
) -> None:
    url, state = outage
    # The default client settings (60 s timeout, 2 retries): the server's own bounds apply.
    summarizer = OpenAISummarizer(base_url=url, api_key="k", model="m")
    options = {**FAST, "summarizer": summarizer}
    caplog.set_level(logging.WARNING, logger="session_server")
    async with (
        running_server(tmp_path / "memory", registry_options=options) as running,
        SessionClient(running.url, "bot") as client,
    ):
        sid = await client.create_session()
        for i in range(6):
            await client.persist_turn(sid, turn(i, size=2))
        await client.call("memory.set_strategy", {"session_id": sid, "strategy": SUMMARIZE})
        pressure = {"prompt_tokens": 1990}
        assert (await client.persist_turn(sid, turn(6, size=2), usage=pressure)).compaction_required
        started = time.monotonic()
        built = await client.build_context(sid)
        rendered = await client.call("context.render", {"session_id": sid, "adapter": "anthropic"})
        elapsed = time.monotonic() - started
        # Bounded: far below the client's 60 s x 3; the previous (no) record applies.
        assert elapsed < 10
        assert await compactions(client, sid) == 0
        assert not any("[MEMORY:" in s for s in built.system_instructions)
        assert rendered["payload"]["messages"]
        problems = running.registry.metrics.summary_problems()
        assert problems["failed"] + problems["slow"] >= 1
        assert any("summary of" in r.getMessage() for r in caplog.records)
        # The provider comes back: a later build (after the backoff) writes the summary.
        state.mode = "ok"
        state.release.set()
        if _is_refused(url):
            return  # nothing to come back to at a refused address
        deadline = time.monotonic() + 20
        while await compactions(client, sid) == 0:
            assert time.monotonic() < deadline, "the summary was never retried"
            await client.build_context(sid)
        final = await client.build_context(sid)
        assert "[MEMORY:EPISODIC]" in final.system_instructions[-1]


def _is_refused(url: str) -> bool:
    with socket.socket() as sock:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        return sock.connect_ex(("127.0.0.1", port)) != 0


PLACEHOLDER = "⟦removed: tool output for search"


@pytest.mark.parametrize("outage", ["hang", "garbage"], indirect=True)
async def test_a_summarizer_outage_falls_back_to_placeholders_when_the_strategy_has_them(
    tmp_path: Path, outage: tuple[str, Outage], caplog: pytest.LogCaptureFixture
) -> None:
    url, state = outage
    summarizer = OpenAISummarizer(base_url=url, api_key="k", model="m")
    options = {**FAST, "summarizer": summarizer}
    strategy = {**SUMMARIZE, "compact_keep": 2}  # summarize, with placeholder parameters
    caplog.set_level(logging.WARNING, logger="session_server")
    async with (
        running_server(tmp_path / "memory", registry_options=options) as running,
        SessionClient(running.url, "bot") as client,
    ):
        sid = await client.create_session()
        for i in range(6):
            await client.persist_turn(sid, turn(i, size=2))
        await client.call("memory.set_strategy", {"session_id": sid, "strategy": strategy})
        pressure = {"prompt_tokens": 1990}
        assert (await client.persist_turn(sid, turn(6, size=2), usage=pressure)).compaction_required
        started = time.monotonic()
        built = await client.build_context(sid)
        rendered = await client.call("context.render", {"session_id": sid, "adapter": "anthropic"})
        assert time.monotonic() - started < 10  # bounded: the summarizer is not waited for
        # Old tool outputs are placeholders; the last compact_keep turns stay whole.
        outputs = [m.content for m in built.messages if m.role == "tool"]
        assert len(outputs) == 7
        assert all(c.startswith(PLACEHOLDER) for c in outputs[:5])
        assert not any(c.startswith(PLACEHOLDER) for c in outputs[5:])
        assert PLACEHOLDER in json.dumps(rendered["payload"], ensure_ascii=False)
        # Recorded as a compaction event (the flag stays set: the summary is still due).
        [event] = await client.load_events(sid, limit=None, actions=["compaction"])
        assert event.compaction is not None and event.compaction["strategy"] == "compact"
        assert event.compaction["fallback"]["for"] == "summarize"
        # Byte-stable: the next build (the summary still down) gives the same messages and
        # writes no second record.
        again = await client.build_context(sid)
        assert again.messages == built.messages
        assert await compactions(client, sid) == 1
        problems = running.registry.metrics.summary_problems()
        assert problems["fallback"] == 1 and problems["failed"] + problems["slow"] >= 1
        assert any("placeholders apply meanwhile" in r.getMessage() for r in caplog.records)
        # The provider comes back: a later build (after the backoff) writes the summary,
        # and it supersedes the placeholders.
        state.mode = "ok"
        state.release.set()
        deadline = time.monotonic() + 20
        while await compactions(client, sid) < 2:
            assert time.monotonic() < deadline, "the summary was never retried"
            await client.build_context(sid)
        records = await client.load_events(sid, limit=None, actions=["compaction"])
        assert [e.compaction["strategy"] for e in records if e.compaction] == [
            "compact",
            "summarize",
        ]
        final = await client.build_context(sid)
        assert "[MEMORY:EPISODIC]" in final.system_instructions[-1]
        assert not any(m.compacted for m in final.messages)
        assert not (await client.persist_turn(sid, [])).compaction_required
