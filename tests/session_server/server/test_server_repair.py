"""Stored histories that used to break every later render, through a real server and client.

Each scenario is persisted with ``turn.persist`` by a ``SessionClient`` over WebSocket,
rendered by ``context.render`` for every adapter, and the payloads are sent with the real
``openai`` and ``anthropic`` SDKs to a local fake provider (127.0.0.1), which must accept
them. Covers issue 12, items 1 and 2.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from session_server import adapters
from session_server.client import SessionClient
from session_server.values.events import ContextMessage, ToolCall
from tests.support.openai_server import FakeOpenAIServer, default_reply
from tests.support.server import RunningServer, running_server


def _reply(path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any] | str]:
    if path.split("?", 1)[0] == "/v1/messages":
        return 200, {
            "id": "msg_test",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "m"),
            "content": [{"type": "text", "text": "ok"}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 1},
        }
    return default_reply(path, body)


@pytest.fixture
def provider() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(_reply) as server:
        yield server


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "memory") as running:
        yield running


def _send(provider: FakeOpenAIServer, name: str, payload: dict[str, Any]) -> None:
    """Send a rendered payload with the provider's own SDK (raises if the SDK refuses)."""
    if name == "openai-chat":
        client = openai.OpenAI(base_url=provider.base_url, api_key="k", max_retries=0)
        client.chat.completions.create(model="m", **payload)
    elif name == "openai-responses":
        client = openai.OpenAI(base_url=provider.base_url, api_key="k", max_retries=0)
        client.responses.create(model="m", **payload)
    elif name == "anthropic":
        base = provider.base_url.removesuffix("/v1")
        claude = anthropic.Anthropic(base_url=base, api_key="k", max_retries=0)
        claude.messages.create(model="m", max_tokens=16, **payload)


async def _render_everywhere(
    client: SessionClient, provider: FakeOpenAIServer, sid: str
) -> dict[str, Any]:
    payloads = {}
    for name in adapters.names():
        first = await client.call("context.render", {"session_id": sid, "adapter": name})
        again = await client.call("context.render", {"session_id": sid, "adapter": name})
        assert first == again  # the same bytes from one build to the next
        payloads[name] = first["payload"]
        await asyncio.to_thread(_send, provider, name, first["payload"])
    return payloads


def call(call_id: str, name: str = "weather", arguments: Any = None) -> ContextMessage:
    args = {"city": "Paris"} if arguments is None else arguments
    return ContextMessage(
        role="assistant", tool_calls=[ToolCall(id=call_id, name=name, arguments=args)]
    )


def result(call_id: str, content: str = "18C") -> ContextMessage:
    return ContextMessage(role="tool", tool_call_id=call_id, name="weather", content=content)


def user(text: str) -> ContextMessage:
    return ContextMessage(role="user", content=text)


async def test_a_call_without_result_then_a_new_turn_renders_with_a_synthetic_result(
    server: RunningServer, provider: FakeOpenAIServer
) -> None:
    async with SessionClient(server.url, "bot") as client:
        sid = await client.create_session()
        await client.persist_turn(sid, [user("Weather?"), call("c9")])  # then the agent died
        await client.persist_turn(sid, [user("Hello?")])
        ctx = await client.build_context(sid)
        assert [m.role for m in ctx.messages] == ["user", "assistant", "tool", "user"]
        synthetic = ctx.messages[2]
        assert synthetic.synthetic and synthetic.is_error and synthetic.tool_call_id == "c9"
        assert synthetic.content == "⟦missing: no result was recorded for weather (call_id=c9)⟧"
        payloads = await _render_everywhere(client, provider, sid)
        tool = payloads["anthropic"]["messages"][2]["content"][0]
        assert tool["type"] == "tool_result" and tool["is_error"] is True
        # Stored events are untouched: no result was written.
        events = await client.load_events(sid)
        assert [e.action for e in events] == ["user_message", "tool_call_request", "user_message"]


async def test_an_unanswered_call_at_the_end_stays_pending(
    server: RunningServer, provider: FakeOpenAIServer
) -> None:
    async with SessionClient(server.url, "bot") as client:
        sid = await client.create_session()
        await client.persist_turn(sid, [user("Weather?"), call("c1")])
        ctx = await client.build_context(sid)
        assert [m.role for m in ctx.messages] == ["user", "assistant"]
        ctx.add_message(result("c1"))  # the caller answers it now
        await client.persist_context(sid, ctx)
        ctx = await client.build_context(sid)
        assert [m.role for m in ctx.messages] == ["user", "assistant", "tool"]
        assert not any(m.synthetic for m in ctx.messages)
        await _render_everywhere(client, provider, sid)


async def test_a_call_id_reused_in_a_later_turn_is_made_unique(
    server: RunningServer, provider: FakeOpenAIServer
) -> None:
    async with SessionClient(server.url, "bot") as client:
        sid = await client.create_session()
        for city in ("Paris", "Rome"):
            turn = [user(city), call("call_1"), result("call_1", city), user("thanks")]
            await client.persist_turn(sid, turn)
        payloads = await _render_everywhere(client, provider, sid)
        chat = payloads["openai-chat"]["messages"]
        ids = [c["id"] for m in chat for c in m.get("tool_calls", ())]
        assert ids == ["call_1", "call_1_2"]
        assert [m["tool_call_id"] for m in chat if m["role"] == "tool"] == ["call_1", "call_1_2"]
        assert [m["content"] for m in chat if m["role"] == "tool"] == ["Paris", "Rome"]


async def test_the_responses_shape_one_call_per_item_renders_everywhere(
    server: RunningServer, provider: FakeOpenAIServer
) -> None:
    async with SessionClient(server.url, "bot") as client:
        sid = await client.create_session()
        turn = [
            user("Paris and Rome?"),
            call("fc_a"),
            call("fc_b"),
            result("fc_a", "18C"),
            result("fc_b", "21C"),
            ContextMessage(role="assistant", content="18C and 21C."),
        ]
        await client.persist_turn(sid, turn)
        payloads = await _render_everywhere(client, provider, sid)
        chat = payloads["openai-chat"]["messages"]
        assert [m["role"] for m in chat] == ["user", "assistant", "tool", "tool", "assistant"]
        assert [c["id"] for c in chat[1]["tool_calls"]] == ["fc_a", "fc_b"]
        items = payloads["openai-responses"]["input"]
        assert [i["type"] for i in items][1:5] == [
            "function_call",
            "function_call",
            "function_call_output",
            "function_call_output",
        ]
        claude = payloads["anthropic"]["messages"]
        assert [b["type"] for b in claude[1]["content"]] == ["tool_use", "tool_use"]
        assert [b["type"] for b in claude[2]["content"]] == ["tool_result", "tool_result"]


async def test_a_late_result_and_an_orphan_result(
    server: RunningServer, provider: FakeOpenAIServer
) -> None:
    async with SessionClient(server.url, "bot") as client:
        sid = await client.create_session()
        await client.persist_turn(sid, [user("Weather?"), call("slow")])
        await client.persist_turn(sid, [user("Still there?")])
        await client.persist_turn(sid, [result("slow", "late 18C"), result("ghost", "?")])
        ctx = await client.build_context(sid)
        assert [(m.role, m.tool_call_id) for m in ctx.messages] == [
            ("user", None),
            ("assistant", None),
            ("tool", "slow"),
            ("user", None),
        ]
        assert ctx.messages[2].content == "late 18C"
        await _render_everywhere(client, provider, sid)


@pytest.mark.parametrize(
    ("sent", "anthropic_input"),
    [
        ('{"city": "Par', {"_raw": '{"city": "Par'}),
        ('{"city": "Paris"}', {"city": "Paris"}),
        (["Paris"], {"_value": ["Paris"]}),
    ],
)
async def test_tool_arguments_are_stored_as_sent_and_rendered_faithfully(
    server: RunningServer, provider: FakeOpenAIServer, sent: Any, anthropic_input: Any
) -> None:
    async with SessionClient(server.url, "bot") as client:
        sid = await client.create_session()
        await client.persist_turn(sid, [user("Weather?"), call("c1", arguments=sent), result("c1")])
        (_, stored, _) = await client.load_events(sid)
        assert stored.tool_calls is not None and stored.tool_calls[0].arguments == sent
        payloads = await _render_everywhere(client, provider, sid)
        text = sent if isinstance(sent, str) else '["Paris"]'
        chat = payloads["openai-chat"]["messages"][1]
        assert chat["tool_calls"][0]["function"]["arguments"] == text
        assert payloads["openai-responses"]["input"][1]["arguments"] == text
        assert payloads["anthropic"]["messages"][1]["content"][0]["input"] == anthropic_input
