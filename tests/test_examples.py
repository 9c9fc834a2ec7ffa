"""The README's examples run against a real server (and a fake model on 127.0.0.1)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support.openai_server import FakeOpenAIServer, response_payload
from tests.support.server import running_server

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def weather_model(path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Calls ``get_weather`` once, then answers with what it returned (both APIs)."""
    if path.endswith("/responses"):
        last = body["input"][-1]
        if last.get("type") == "function_call_output":
            text = {"type": "output_text", "text": f"It is {last['output']}.", "annotations": []}
            output = [
                {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                 "content": [text]}
            ]  # fmt: skip
        else:
            output = [
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "function_call", "id": "fc_1", "call_id": "call_1",
                 "name": "get_weather", "arguments": '{"city": "Paris"}', "status": "completed"},
            ]  # fmt: skip
        return 200, response_payload(body, output)
    last = body["messages"][-1]
    if last["role"] == "tool":
        message: dict[str, Any] = {"role": "assistant", "content": f"It is {last['content']}."}
    else:
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
            ],
        }  # fmt: skip
    return 200, {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55},
    }  # fmt: skip


@pytest.fixture
def model(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    with FakeOpenAIServer(weather_model) as server:
        yield server


async def test_client_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = load("client_session")
    async with running_server(tmp_path / "memory") as server:
        await module.main(server.url)
    out = capsys.readouterr().out
    assert "persisted seqs [1, 2, 3, 4]" in out
    assert "4 agent_message 18°C and sunny." in out


async def test_openai_agents_example(
    tmp_path: Path, model: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    module = load("openai_agents_session")
    async with running_server(tmp_path / "memory") as server:
        await module.main(server.url, model.base_url)
    out = capsys.readouterr().out
    assert "answer: It is Paris: 18°C and sunny." in out
    assert "function_call_output" in out and "reasoning" in out


async def test_openai_client_loop_example(
    tmp_path: Path, model: FakeOpenAIServer, capsys: pytest.CaptureFixture[str]
) -> None:
    module = load("openai_client_loop")
    async with running_server(tmp_path / "memory") as server:
        await module.main(server.url, model.base_url)
    out = capsys.readouterr().out
    assert "answer: It is Paris: 18°C and sunny." in out
    assert "1 user_message" in out and "2 tool_call_request" in out and "3 tool_result" in out
    second = model.requests[-1]["body"]["messages"]
    assert second[0] == {"role": "system", "content": "Be brief."}
    assert second[-1]["role"] == "tool" and second[-2]["tool_calls"][0]["id"] == "call_1"


async def test_user_token_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    module = load("user_token")
    secret = "example-secret-" + "e" * 32
    async with running_server(tmp_path / "memory", secrets=[secret]) as server:
        await module.main(server.url, secret)
    out = capsys.readouterr().out
    assert "visible sessions: ['ada']" in out
    assert "refused: token.scope: 'session.create' needs scope 'write'" in out


def story_model(path: str, body: dict[str, Any]) -> tuple[int, str]:
    """A streamed chat completion (server-sent events), one word per chunk."""
    assert body.get("stream") is True
    events = []
    for i, word in enumerate(["Once", " upon", " a", " time", "."]):
        delta: dict[str, Any] = {"content": word}
        if i == 0:
            delta["role"] = "assistant"
        events.append(
            {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
             "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        )  # fmt: skip
    events.append(
        {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
         "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    )  # fmt: skip
    sse = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    return 200, sse


async def test_live_turn_example(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    module = load("live_turn")
    with FakeOpenAIServer(story_model) as model:
        async with running_server(tmp_path / "memory") as server:
            await module.main(server.url, model.base_url)
    out = capsys.readouterr().out
    assert "persisted seqs [1, 2]" in out
    assert "stored: 2 agent_message Once upon a time." in out
    assert "the other tab saw: Once upon a time." in out


def recall_model(path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """Searches its memory with ``recall_search`` (offered in ``tools``), then answers
    with the code the tool result holds."""
    import re

    names = [t["function"]["name"] for t in body.get("tools", [])]
    last = body["messages"][-1]
    if last["role"] == "tool":
        code = re.search(r"\b\d{4}\b", last["content"])
        message: dict[str, Any] = {
            "role": "assistant",
            "content": f"Your locker code is {code.group(0) if code else 'unknown'}.",
        }
    else:
        assert "recall_search" in names
        message = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_r", "type": "function",
                 "function": {"name": "recall_search", "arguments": '{"query": "locker code"}'}}
            ],
        }  # fmt: skip
    return 200, {
        "id": "chatcmpl-r", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55},
    }  # fmt: skip


async def test_recall_agent_example(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    module = load("recall_agent")
    with FakeOpenAIServer(recall_model) as model:
        async with running_server(tmp_path / "memory") as server:
            await module.main(server.url, model.base_url)
    out = capsys.readouterr().out
    assert "compacted: True" in out
    assert "turn 3 in the prompt: False" in out
    assert "summarised out of your context" in out
    assert "answer: Your locker code is 4417." in out
    # The model's second call carried the tool result, after its recall_search call.
    second = model.requests[-1]["body"]["messages"]
    assert second[-1]["role"] == "tool" and "4417" in second[-1]["content"]
