from __future__ import annotations

import json
from typing import Any

import pytest

from session_server.compaction.config import StrategyConfig
from session_server.compaction.summarize import SummaryRequest, plan_summarize
from session_server.compaction.summary_json import parse_summary_json
from session_server.runtime.summarizers import (
    SYSTEM_PROMPT,
    ExtractiveSummarizer,
    OpenAISummarizer,
    Summarizer,
    default_summarizer,
    resolve_openai_settings,
)
from session_server.values.errors import SummarizerError
from tests.session_server.compaction.sessions import SessionLog, tool_session
from tests.support.openai_server import FakeOpenAIServer


def _request(log: SessionLog | None = None) -> SummaryRequest:
    log = log or tool_session(6)
    req = plan_summarize(log.events, StrategyConfig(mode="summarize")).request
    assert req is not None
    return req


def _completion(content: str | None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
    }


GOOD = {
    "summary": "The user asked about items 1 and 2; both were fine.",
    "tags": ["items"],
    "salience": 0.7,
    "facts": [{"fact": "The user tracks items.", "tags": ["user"], "confidence": 0.8}],
}


async def test_extractive_summarizer_is_deterministic_and_offline() -> None:
    log = SessionLog()
    log.system("Always answer in French.")
    log.user("My name is Ada. I prefer short answers. What is 2+2?")
    log.call("c1", "calculator", expr="2+2")
    log.result("c1", "calculator", "4")
    log.answer("4")
    for i in range(2, 7):
        log.tool_turn(i)
    req = _request(log)
    s = ExtractiveSummarizer()
    assert isinstance(s, Summarizer) and s.name == "extractive"
    first = await s.summarize(req)
    assert first == await s.summarize(req) == s.summarize_sync(req)
    assert first.summary.startswith('turn_0000 (no text) | turn_0001 user: "My name is Ada.')
    assert "tools: calculator" in first.summary and 'assistant: "4"' in first.summary
    assert [f.fact for f in first.facts] == [
        "Instruction: Always answer in French.",
        "My name is Ada.",
        "I prefer short answers.",
    ]
    assert first.facts[0].confidence == 0.9 and first.tags[0] == "extractive"


async def test_extractive_summary_elides_middle_turns_when_long() -> None:
    log = tool_session(60)
    req = _request(log)
    result = await ExtractiveSummarizer(max_chars=600).summarize(req)
    assert len(result.summary) <= 600
    assert result.summary.startswith("turn_0001") and "turn_0056" in result.summary
    assert "turns …" in result.summary


async def test_openai_summarizer_over_http() -> None:
    def reply(path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any] | str]:
        return 200, _completion(json.dumps(GOOD))

    with FakeOpenAIServer(reply) as server:
        s = OpenAISummarizer(base_url=server.base_url, api_key="k", model="tiny", max_retries=0)
        try:
            result = await s.summarize(_request())
        finally:
            await s.aclose()
        assert len(server.requests) == 1
        sent = server.requests[0]
    assert result.summary == GOOD["summary"]
    assert result.salience == 0.7 and result.tags == ["items"]
    assert [(f.fact, f.tags, f.confidence) for f in result.facts] == [
        ("The user tracks items.", ["user"], 0.8)
    ]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["headers"]["authorization"] == "Bearer k"
    body = sent["body"]
    assert body["model"] == "tiny"
    assert body["response_format"] == {"type": "json_object"}
    assert body["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}
    assert "turn_0001:" in body["messages"][1]["content"]


async def test_openai_prompt_includes_previous_memory() -> None:
    log = tool_session(6)
    req = _request(log)
    prev = SummaryRequest(
        turns=req.turns,
        previous_episodic=[{"summary": "Earlier episode."}],
        previous_semantic=[{"fact": "Known fact.", "salience": 0.5}],
        turn_ids=req.turn_ids,
        seq_range=req.seq_range,
        tail_start_seq=req.tail_start_seq,
        tail_start_turn=req.tail_start_turn,
        event_count=req.event_count,
    )
    with FakeOpenAIServer(lambda p, b: (200, _completion(json.dumps(GOOD)))) as server:
        s = OpenAISummarizer(base_url=server.base_url, model="tiny", max_retries=0)
        try:
            await s.summarize(prev)
        finally:
            await s.aclose()
        prompt = server.requests[0]["body"]["messages"][1]["content"]
    assert "Existing episodic memory:\n1) Earlier episode." in prompt
    assert "Existing semantic memory:\n- Known fact." in prompt


BAD_ANSWERS: list[tuple[int, dict[str, Any] | str, str]] = [
    (200, _completion(None), "empty answer"),
    (200, _completion("   "), "empty answer"),
    (200, _completion("Sure! Here is the summary."), "not JSON"),
    (200, _completion("[1, 2]"), "expected a JSON object"),
    (200, _completion(json.dumps({"facts": []})), "'summary'"),
    (200, _completion(json.dumps({"summary": "s", "facts": {}})), "'facts' must be a list"),
    (200, _completion(json.dumps({"summary": "s", "facts": [{"tags": []}]})), r"facts\[0\]\.fact"),
    (
        200,
        _completion(json.dumps({"summary": "s", "facts": [{"fact": "f", "confidence": 3}]})),
        r"facts\[0\]\.confidence",
    ),
    (200, _completion(json.dumps({"summary": "s", "salience": "high"})), "'salience'"),
    (200, _completion(json.dumps({"summary": "s", "tags": "a"})), "'tags'"),
    (200, {**_completion("x"), "choices": []}, "no choices"),
    (500, {"error": {"message": "boom", "type": "server_error"}}, "request failed"),
    (401, {"error": {"message": "bad key", "type": "invalid_request_error"}}, "request failed"),
    (200, "not json at all", "not a chat completion"),
]


@pytest.mark.parametrize(("status", "payload", "match"), BAD_ANSWERS)
async def test_openai_summarizer_rejects_bad_answers(
    status: int, payload: dict[str, Any] | str, match: str
) -> None:
    with FakeOpenAIServer(lambda p, b: (status, payload)) as server:
        s = OpenAISummarizer(base_url=server.base_url, model="m", max_retries=0)
        try:
            with pytest.raises(SummarizerError, match=match):
                await s.summarize(_request())
        finally:
            await s.aclose()


async def test_unreachable_endpoint_is_a_summarizer_error() -> None:
    with FakeOpenAIServer() as server:
        url = server.base_url
    s = OpenAISummarizer(base_url=url, model="m", max_retries=0, timeout=5)
    try:
        with pytest.raises(SummarizerError, match="request failed"):
            await s.summarize(_request())
    finally:
        await s.aclose()


def test_parse_summary_json_defaults() -> None:
    r = parse_summary_json('{"summary": " s ", "facts": [{"fact": "f"}]}')
    assert r.summary == "s" and r.salience == 0.5 and r.tags == []
    assert r.facts[0].confidence == 0.5 and r.facts[0].tags == []


def test_settings_precedence() -> None:
    env = {
        "OPENAI_BASE_URL": "http://openai-env/v1",
        "OPENAI_API_KEY": "openai-key",
        "OPENAI_MODEL": "openai-model",
    }
    assert tuple(resolve_openai_settings(environ=env)) == (
        "http://openai-env/v1",
        "openai-key",
        "openai-model",
    )
    env |= {
        "SESSION_SERVER_SUMMARIZER_BASE_URL": "http://ss/v1",
        "SESSION_SERVER_SUMMARIZER_API_KEY": "ss-key",
        "SESSION_SERVER_SUMMARIZER_MODEL": "ss-model",
    }
    assert tuple(resolve_openai_settings(environ=env)) == ("http://ss/v1", "ss-key", "ss-model")
    explicit = resolve_openai_settings(
        base_url="http://arg/v1", api_key="a", model="m", environ=env
    )
    assert tuple(explicit) == ("http://arg/v1", "a", "m")


def test_settings_errors_name_what_is_missing() -> None:
    with pytest.raises(SummarizerError, match=r"model.*SESSION_SERVER_SUMMARIZER_MODEL"):
        resolve_openai_settings(environ={})
    with pytest.raises(SummarizerError, match="api_key"):
        resolve_openai_settings(model="m", environ={})
    local = resolve_openai_settings(base_url="http://127.0.0.1:1/v1", model="m", environ={})
    assert local.api_key == "unused"


def test_default_summarizer_from_environment() -> None:
    assert isinstance(default_summarizer({}), ExtractiveSummarizer)
    s = default_summarizer(
        {
            "SESSION_SERVER_SUMMARIZER": "openai",
            "OPENAI_BASE_URL": "http://x/v1",
            "OPENAI_MODEL": "m",
        }
    )
    assert isinstance(s, OpenAISummarizer) and s.settings.model == "m"
    with pytest.raises(SummarizerError, match="SESSION_SERVER_SUMMARIZER"):
        default_summarizer({"SESSION_SERVER_SUMMARIZER": "magic"})
