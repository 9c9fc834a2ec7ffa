"""The shared tool-pairing and image checks, and that every checked adapter applies them."""

from __future__ import annotations

import pytest

from session_server.adapters import anthropic, openai_chat, openai_responses
from session_server.adapters.base import ModelFormatAdapter
from session_server.adapters.checks import check_images, check_tool_pairing, render_error
from session_server.values.errors import InvalidParamsError, RenderError
from session_server.values.events import ContextMessage, ToolCall

CHECKED: list[ModelFormatAdapter] = [
    openai_chat.adapter,
    openai_responses.adapter,
    anthropic.adapter,
]


def user(text: str = "q") -> ContextMessage:
    return ContextMessage(role="user", content=text)


def calls(*ids: str) -> ContextMessage:
    return ContextMessage(role="assistant", tool_calls=[ToolCall(id=i, name="t") for i in ids])


def result(call_id: str | None) -> ContextMessage:
    return ContextMessage(role="tool", content="r", tool_call_id=call_id)


REFUSED = [
    pytest.param(
        [user(), user(), user(), result("x")],
        "messages[3]: tool result for call_id 'x' has no preceding tool call",
        id="orphan-result",
    ),
    pytest.param(
        [user(), calls("c1"), result("c1"), result("c1")],
        "messages[3]: duplicate tool result for call_id 'c1'",
        id="duplicate-result",
    ),
    pytest.param(
        [user(), calls("c1"), user("again"), result("c1")],
        "messages[1]: tool call 'c1' has no result before messages[2] (user); "
        "a call may stay unanswered only in the last call group",
        id="result-after-another-message",
    ),
    pytest.param(
        [user(), calls("c1", "c2"), result("c1"), ContextMessage(role="assistant", content="x")],
        "messages[1]: tool call 'c2' has no result before messages[3] (assistant); "
        "a call may stay unanswered only in the last call group",
        id="missing-result-then-assistant",
    ),
    pytest.param(
        [user(), calls("c1"), calls("c2"), result("c1"), calls("c3")],
        "messages[2]: tool call 'c2' has no result before messages[4] (assistant); "
        "a call may stay unanswered only in the last call group",
        id="group-missing-a-result-then-more-calls",
    ),
    pytest.param(
        [user(), calls("c1"), result("c1"), calls("c1")],
        "messages[3].tool_calls[0].id: tool call id 'c1' is already used by messages[1]",
        id="reused-call-id",
    ),
    pytest.param(
        [user(), calls("")],
        "messages[1].tool_calls[0].id: tool call id must be a non-empty string",
        id="empty-call-id",
    ),
    pytest.param(
        [result(None)],
        "messages[0].tool_call_id: tool result has no tool_call_id",
        id="result-without-id",
    ),
    pytest.param(
        [ContextMessage(role="user", tool_calls=[ToolCall(id="c", name="t")])],
        "messages[0].tool_calls: only assistant messages carry tool calls, not user",
        id="calls-on-user",
    ),
]


@pytest.mark.parametrize(("messages", "error"), REFUSED)
def test_check_tool_pairing_refuses(messages: list[ContextMessage], error: str) -> None:
    with pytest.raises(RenderError) as info:
        check_tool_pairing(messages)
    assert info.value.message == error


@pytest.mark.parametrize("adapter", CHECKED, ids=lambda a: a.name)
@pytest.mark.parametrize(("messages", "error"), REFUSED)
def test_every_checked_adapter_refuses_the_same_way(
    adapter: ModelFormatAdapter, messages: list[ContextMessage], error: str
) -> None:
    with pytest.raises(RenderError) as info:
        adapter.to_model_messages(["sys"], messages)
    assert info.value.message == error
    assert info.value.code == -32602


ACCEPTED = [
    pytest.param([], id="empty"),
    pytest.param([user(), calls("c1", "c2"), result("c2"), result("c1"), user()], id="any-order"),
    pytest.param([user(), calls("c1")], id="pending-last"),
    pytest.param([user(), calls("c1", "c2"), result("c1")], id="partly-answered-last"),
    pytest.param([calls("c1"), result("c1"), calls("c2"), result("c2")], id="chained-calls"),
    pytest.param(
        [user(), calls("c1"), calls("c2"), result("c2"), result("c1"), user()], id="group"
    ),
    pytest.param([user(), calls("c1"), calls("c2")], id="pending-group"),
    pytest.param([user(), calls("c1"), calls("c2"), result("c1")], id="partly-answered-group"),
]


@pytest.mark.parametrize("messages", ACCEPTED)
def test_check_tool_pairing_accepts(messages: list[ContextMessage]) -> None:
    check_tool_pairing(messages)
    for adapter in CHECKED:
        assert adapter.to_model_messages([], messages)


def test_chat_merges_a_call_group_into_one_assistant_message() -> None:
    first = ContextMessage(role="assistant", content="Checking.", tool_calls=[ToolCall("c1", "t")])
    rendered = openai_chat.adapter.to_model_messages(
        [], [user(), first, calls("c2"), result("c1"), result("c2")]
    )["messages"]
    assert [m["role"] for m in rendered] == ["user", "assistant", "tool", "tool"]
    assert rendered[1]["content"] == "Checking."
    assert [c["id"] for c in rendered[1]["tool_calls"]] == ["c1", "c2"]
    responses = openai_responses.adapter.to_model_messages(
        [], [user(), calls("c1"), calls("c2"), result("c1"), result("c2")]
    )["input"]
    assert [item["type"] for item in responses] == [
        "message",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
    ]


def test_render_error_names_the_path_and_is_invalid_params() -> None:
    err = render_error(4, "bad", field="images[1]")
    assert isinstance(err, InvalidParamsError)
    assert err.message == "messages[4].images[1]: bad"
    assert err.data == {"field": "messages[4].images[1]", "index": 4}
    assert err.to_jsonrpc()["code"] == -32602


def test_check_images() -> None:
    ok = [ContextMessage(role="user", images=["https://x/a.png"])]
    check_images(ok, adapter="demo", roles=("user",))
    with pytest.raises(RenderError, match=r"^messages\[0\]\.images\[0\]: image URL must be"):
        check_images([ContextMessage(role="user", images=[""])], adapter="demo", roles=("user",))
    with pytest.raises(
        RenderError,
        match=r"^messages\[0\]\.images: demo cannot attach images to a tool message "
        r"\(images are accepted on: user\)$",
    ):
        check_images(
            [ContextMessage(role="tool", tool_call_id="c", images=["u"])],
            adapter="demo",
            roles=("user",),
        )
