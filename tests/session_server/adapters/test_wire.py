"""Rendered payloads go through the real SDK clients and arrive on the wire unchanged.

Each test starts a local OpenAI-compatible server (``tests.support.openai_server``) on
127.0.0.1 and points the unpatched ``openai`` (and ``anthropic``) client at it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from session_server.adapters import anthropic as anthropic_adapter
from session_server.adapters import openai_chat, openai_responses
from tests.session_server.adapters.test_sdk_types import CONTEXTS
from tests.support.openai_server import FakeOpenAIServer, default_reply


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as srv:
        yield srv


@pytest.fixture
def client(server: FakeOpenAIServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0) as c:
        yield c


@pytest.mark.parametrize("name", sorted(CONTEXTS))
def test_chat_payload_arrives_unchanged(
    name: str, server: FakeOpenAIServer, client: openai.OpenAI
) -> None:
    system, messages = CONTEXTS[name]
    payload = openai_chat.adapter.to_model_messages(system, messages)
    completion = client.chat.completions.create(model="test-model", messages=payload["messages"])
    assert completion.choices[0].message.content == "ok"
    assert completion.usage is not None and completion.usage.prompt_tokens == 10
    [request] = server.requests
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["authorization"] == "Bearer test"
    assert request["body"] == {"model": "test-model", "messages": payload["messages"]}


@pytest.mark.parametrize("name", sorted(CONTEXTS))
def test_responses_payload_arrives_unchanged(
    name: str, server: FakeOpenAIServer, client: openai.OpenAI
) -> None:
    system, messages = CONTEXTS[name]
    payload = openai_responses.adapter.to_model_messages(system, messages)
    if "instructions" in payload:
        response = client.responses.create(
            model="test-model", input=payload["input"], instructions=payload["instructions"]
        )
    else:
        response = client.responses.create(model="test-model", input=payload["input"])
    assert response.output_text == "ok"
    [request] = server.requests
    assert request["path"] == "/v1/responses"
    assert request["body"] == {"model": "test-model", **payload}
    assert ("instructions" in request["body"]) == bool(system)


def _anthropic_reply(path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any] | str]:
    if path != "/v1/messages":
        return default_reply(path, body)
    return 200, {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": body["model"],
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }


@pytest.mark.parametrize("name", sorted(CONTEXTS))
def test_anthropic_payload_arrives_unchanged(name: str) -> None:
    system, messages = CONTEXTS[name]
    payload = anthropic_adapter.adapter.to_model_messages(system, messages)
    with (
        FakeOpenAIServer(reply=_anthropic_reply) as srv,
        anthropic.Anthropic(
            base_url=srv.base_url.removesuffix("/v1"), api_key="test", max_retries=0
        ) as client,
    ):
        if "system" in payload:
            message = client.messages.create(
                model="m", max_tokens=16, system=payload["system"], messages=payload["messages"]
            )
        else:
            message = client.messages.create(model="m", max_tokens=16, messages=payload["messages"])
        [request] = srv.requests
    assert message.content[0].type == "text" and message.content[0].text == "ok"
    assert request["path"] == "/v1/messages"
    assert request["body"] == {"model": "m", "max_tokens": 16, **payload}


# The test server itself: its API is shared with other tests.


def test_default_replies_are_valid_sdk_objects() -> None:
    chat_status, chat = default_reply("/v1/chat/completions", {"model": "x"})
    resp_status, resp = default_reply("/v1/responses", {"model": "x", "instructions": "be"})
    assert chat_status == 200 and resp_status == 200
    completion = ChatCompletion.model_validate(chat, strict=True)
    assert completion.choices[0].message.content == "ok"
    assert completion.usage is not None and completion.usage.total_tokens == 11
    response = Response.model_validate(resp, strict=True)
    assert response.output_text == "ok" and response.instructions == "be"


def test_server_address_and_unknown_route(server: FakeOpenAIServer, client: openai.OpenAI) -> None:
    assert server.base_url.startswith("http://127.0.0.1:") and server.base_url.endswith("/v1")
    with pytest.raises(openai.NotFoundError):
        client.models.list()
    assert server.requests[0]["path"] == "/v1/models"
    assert server.requests[0]["body"] is None


def test_custom_reply_json_and_raw_text() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    def reply(path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any] | str]:
        seen.append((path, body))
        if body.get("model") == "broken":
            return 500, "upstream exploded"
        status, payload = default_reply(path, body)
        assert isinstance(payload, dict)
        payload["choices"][0]["message"]["content"] = "custom"
        return status, payload

    with (
        FakeOpenAIServer(reply=reply) as srv,
        openai.OpenAI(base_url=srv.base_url, api_key="test", max_retries=0) as client,
    ):
        out = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
        assert out.choices[0].message.content == "custom"
        with pytest.raises(openai.InternalServerError) as info:
            client.chat.completions.create(
                model="broken", messages=[{"role": "user", "content": "hi"}]
            )
        assert "upstream exploded" in str(info.value.response.text)
        assert [r["body"]["model"] for r in srv.requests] == ["m", "broken"]
    assert [path for path, _ in seen] == ["/v1/chat/completions"] * 2


def test_close_is_idempotent_and_releases_the_port() -> None:
    srv = FakeOpenAIServer()
    srv.close()
    srv.close()
    with (
        openai.OpenAI(base_url=srv.base_url, api_key="test", max_retries=0, timeout=5) as client,
        pytest.raises(openai.APIConnectionError),
    ):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
