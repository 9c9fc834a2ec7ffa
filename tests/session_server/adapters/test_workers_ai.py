"""The Workers AI adapter, exactly as DESIGN §3, and a full agentic loop through it."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from session_server import adapters
from session_server.adapters.base import ModelFormatAdapter
from session_server.adapters.workers_ai import WorkersAIAdapter, adapter
from session_server.values.codec import (
    dehydrate_event,
    event_to_message,
    hydrate_event,
    message_to_event,
)
from session_server.values.context import WorkingContext, build_working_context
from session_server.values.events import ContextMessage, SessionEvent, ToolCall

MESSAGE_KEYS = {"role", "content", "tool_calls", "tool_call_id", "name"}


def no_nulls(value: Any, path: str = "$") -> None:
    """Fail if any value anywhere in ``value`` is None (absent keys, never null)."""
    assert value is not None, f"null at {path}"
    if isinstance(value, dict):
        for k, v in value.items():
            no_nulls(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            no_nulls(v, f"{path}[{i}]")


def render(instructions: list[str], messages: list[ContextMessage]) -> list[dict[str, Any]]:
    out = adapter.to_model_messages(instructions, messages)
    assert set(out) == {"messages"}
    no_nulls(out)
    json.dumps(out)  # plain JSON data
    for item in out["messages"]:
        assert set(item) <= MESSAGE_KEYS
    return list(out["messages"])


class TestIdentity:
    def test_name(self) -> None:
        assert adapter.name == "workers-ai"
        assert isinstance(adapter, WorkersAIAdapter)

    def test_registered(self) -> None:
        assert adapters.get("workers-ai") is adapter
        assert "workers-ai" in adapters.names()

    def test_satisfies_the_protocol(self) -> None:
        assert isinstance(adapter, ModelFormatAdapter)


class TestSystemMessage:
    def test_no_instructions_no_system_message(self) -> None:
        assert render([], [ContextMessage(role="user", content="hi")]) == [
            {"role": "user", "content": "hi"}
        ]
        assert adapter.to_model_messages((), []) == {"messages": []}

    def test_one_instruction(self) -> None:
        assert render(["Be brief."], []) == [{"role": "system", "content": "Be brief."}]

    def test_instructions_join_with_a_blank_line(self) -> None:
        out = render(["You are helpful.", "Answer in French.", "Be brief."], [])
        assert out == [
            {"role": "system", "content": "You are helpful.\n\nAnswer in French.\n\nBe brief."}
        ]

    def test_the_system_message_leads(self) -> None:
        out = render(["sys"], [ContextMessage(role="user", content="hi")])
        assert [m["role"] for m in out] == ["system", "user"]

    def test_system_messages_from_history_follow_in_place(self) -> None:
        msgs = [
            ContextMessage(role="system", content="Summary of earlier turns"),
            ContextMessage(role="user", content="hi"),
        ]
        out = render(["sys"], msgs)
        assert out == [
            {"role": "system", "content": "sys"},
            {"role": "system", "content": "Summary of earlier turns"},
            {"role": "user", "content": "hi"},
        ]


class TestMessages:
    def test_plain_messages_have_only_role_and_content(self) -> None:
        msgs = [
            ContextMessage(role="user", content="hi", metadata={"k": 1}, images=["u"]),
            ContextMessage(role="assistant", content="yo", reasoning="secret thoughts"),
        ]
        assert render([], msgs) == [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "yo"},
        ]

    def test_tool_calls_shape(self) -> None:
        msg = ContextMessage(
            role="assistant",
            content="",
            tool_calls=[
                ToolCall("call_1", "get_weather", {"city": "Zürich", "days": [1, 2]}),
                ToolCall("call_2", "get_time"),
            ],
        )
        assert render([], [msg]) == [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {
                            "name": "get_weather",
                            "arguments": '{"city":"Zürich","days":[1,2]}',
                        },
                    },
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "get_time", "arguments": "{}"},
                    },
                ],
            }
        ]

    def test_arguments_are_a_json_string_that_parses_back(self) -> None:
        args = {"q": "naïve ☕", "n": 3, "nested": {"ok": True, "none": None}}
        out = adapter.to_model_messages(
            [], [ContextMessage(role="assistant", tool_calls=[ToolCall("c", "f", args)])]
        )
        encoded = out["messages"][0]["tool_calls"][0]["function"]["arguments"]
        assert isinstance(encoded, str)
        assert json.loads(encoded) == args

    def test_empty_tool_calls_list_is_absent(self) -> None:
        out = render([], [ContextMessage(role="assistant", content="x", tool_calls=[])])
        assert out == [{"role": "assistant", "content": "x"}]

    def test_tool_result_has_tool_call_id_and_name(self) -> None:
        msg = ContextMessage(
            role="tool", content='{"temp":21}', tool_call_id="call_1", name="get_weather"
        )
        assert render([], [msg]) == [
            {
                "role": "tool",
                "content": '{"temp":21}',
                "tool_call_id": "call_1",
                "name": "get_weather",
            }
        ]

    def test_tool_result_without_name_has_no_name_key(self) -> None:
        msg = ContextMessage(role="tool", content="42", tool_call_id="call_1", is_error=True)
        assert render([], [msg]) == [{"role": "tool", "content": "42", "tool_call_id": "call_1"}]

    def test_compacted_and_error_flags_are_not_sent(self) -> None:
        msg = ContextMessage(
            role="tool", content="⟦removed⟧", tool_call_id="c", name="f", compacted=True
        )
        assert render([], [msg]) == [
            {"role": "tool", "content": "⟦removed⟧", "tool_call_id": "c", "name": "f"}
        ]

    def test_pure_and_does_not_mutate_its_input(self) -> None:
        instructions = ["a", "b"]
        msgs = [
            ContextMessage(role="user", content="hi"),
            ContextMessage(role="assistant", tool_calls=[ToolCall("c", "f", {"x": [1]})]),
        ]
        before = msgspec.to_builtins(msgs)
        first = adapter.to_model_messages(instructions, msgs)
        second = adapter.to_model_messages(instructions, msgs)
        assert first == second
        assert first is not second
        assert instructions == ["a", "b"]
        assert msgspec.to_builtins(msgs) == before

    @pytest.mark.parametrize("role", ["system", "user", "assistant", "tool"])
    def test_every_role_renders(self, role: str) -> None:
        msg = ContextMessage(role=role, content="x", tool_call_id="c" if role == "tool" else None)  # type: ignore[arg-type]
        assert render([], [msg])[0]["role"] == role


# --------------------------------------------------------------------------------------
# A full agentic loop: build -> render -> model answers -> add -> persist -> rebuild
# --------------------------------------------------------------------------------------


class FakeModel:
    """Answers like Workers AI: first a tool call, then the final text."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []

    def run(self, request: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(json.loads(json.dumps(request)))  # what goes over the wire
        last = request["messages"][-1]
        if last["role"] == "user":
            return {
                "response": None,
                "tool_calls": [
                    {"id": "call_w1", "name": "get_weather", "arguments": {"city": "Paris"}}
                ],
            }
        assert last["role"] == "tool"
        return {"response": f"It is {json.loads(last['content'])['temp']}°C in Paris."}


class FakeStore:
    """Stores rows as the SQL store would: dehydrated, seq assigned on append."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def append(self, events: list[SessionEvent]) -> None:
        for ev in events:
            row = dehydrate_event(ev)
            row["seq"] = len(self.rows) + 1
            self.rows.append(row)

    def load(self) -> list[SessionEvent]:
        return [hydrate_event(dict(r)) for r in self.rows]


def run_turn(store: FakeStore, model: FakeModel, user_text: str) -> WorkingContext:
    ctx = build_working_context(store.load(), system_instructions=["You are a weather bot."])
    ctx.add_message(ContextMessage(role="user", content=user_text))
    while True:
        answer = model.run(adapter.to_model_messages(ctx.system_instructions, ctx.messages))
        if answer.get("tool_calls"):
            calls = [ToolCall(c["id"], c["name"], c["arguments"]) for c in answer["tool_calls"]]
            ctx.add_message(ContextMessage(role="assistant", content="", tool_calls=calls))
            for call in calls:
                result = json.dumps({"city": call.arguments["city"], "temp": 21})
                ctx.add_message(
                    ContextMessage(
                        role="tool", content=result, tool_call_id=call.id, name=call.name
                    )
                )
            continue
        ctx.add_message(ContextMessage(role="assistant", content=answer["response"]))
        break
    store.append([message_to_event("s1", m) for m in ctx.get_new_messages()])
    return ctx


def test_full_agentic_loop_conversation() -> None:
    store, model = FakeStore(), FakeModel()

    ctx = run_turn(store, model, "What is the weather in Paris?")
    assert [m.role for m in ctx.get_new_messages()] == ["user", "assistant", "tool", "assistant"]
    assert [r["action"] for r in store.rows] == [
        "user_message",
        "tool_call_request",
        "tool_result",
        "agent_message",
    ]
    assert [r["seq"] for r in store.rows] == [1, 2, 3, 4]
    assert len({r["id"] for r in store.rows}) == 4

    # The second request of the first turn carried the call and its result.
    assert model.requests[1]["messages"] == [
        {"role": "system", "content": "You are a weather bot."},
        {"role": "user", "content": "What is the weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_w1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {
            "role": "tool",
            "content": '{"city": "Paris", "temp": 21}',
            "tool_call_id": "call_w1",
            "name": "get_weather",
        },
    ]

    # A second turn rebuilds the context from storage: history renders exactly as the
    # first turn left it in memory, followed by the new user message.
    run_turn(store, model, "And tomorrow?")
    second_turn_first_request = model.requests[2]["messages"]
    expected_history = adapter.to_model_messages(ctx.system_instructions, ctx.messages)["messages"]
    assert second_turn_first_request == [
        *expected_history,
        {"role": "user", "content": "And tomorrow?"},
    ]
    assert len(store.rows) == 8
    assert [r["seq"] for r in store.rows] == list(range(1, 9))

    # Everything stored maps back to the messages that were added; the fake model reused
    # the call id ``call_w1`` in the second turn, which the build makes unique.
    rebuilt = build_working_context(store.load())
    assert rebuilt.base_seq == 8
    mapped = [event_to_message(e) for e in store.load()]
    ids = [m.tool_call_id for m in rebuilt.messages if m.tool_call_id]
    ids += [c.id for m in rebuilt.messages for c in m.tool_calls or ()]
    assert sorted(ids) == ["call_w1", "call_w1", "call_w1_2", "call_w1_2"]
    assert [m.content for m in mapped if m] == [m.content for m in rebuilt.messages]
    final = render(["You are a weather bot."], rebuilt.messages)
    assert final[-1] == {"role": "assistant", "content": "It is 21°C in Paris."}
    for request in model.requests:
        no_nulls(request)
