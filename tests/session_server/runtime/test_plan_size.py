"""``plan_size`` (``runtime/plan_size``): what a write weighs before it is planned
on the event loop or on a worker, and the bound the RPC layer gives it."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session_server.runtime import plan_size as plan_size_module
from session_server.runtime.off_loop import LARGE_CONTENT_CHARS
from session_server.runtime.plan_size import ITEM_CHARS, REENCODED_GROWTH, plan_size
from session_server.values.events import ContextMessage, ToolCall
from session_server.values.validation import parse_messages

TURN = [
    ContextMessage(role="user", content="what is the weather?"),
    ContextMessage(
        role="assistant", content="", tool_calls=[ToolCall("c1", "weather", {"city": "Oslo"})]
    ),
]
CHARS = len("what is the weather?") + len('{"city":"Oslo"}')


def test_without_a_bound_the_characters_are_counted() -> None:
    assert plan_size(TURN) == 2 * ITEM_CHARS + CHARS


def test_a_bound_that_keeps_the_turn_small_is_taken_without_a_walk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def walked(items: Any) -> int:
        raise AssertionError("the characters were walked")

    monkeypatch.setattr(plan_size_module, "_content_chars", walked)
    bound = 300  # the frame's size
    size = plan_size(TURN, bound)
    assert size == 2 * ITEM_CHARS + REENCODED_GROWTH * bound
    assert size >= 2 * ITEM_CHARS + CHARS and size < LARGE_CONTENT_CHARS  # small, as the walk says


def test_a_bound_past_the_threshold_does_not_make_a_small_turn_large() -> None:
    # A large frame may carry a small turn (large instructions, say): then the walk decides.
    assert plan_size(TURN, LARGE_CONTENT_CHARS) == 2 * ITEM_CHARS + CHARS


def test_a_large_turn_with_a_true_bound_is_large() -> None:
    big = [ContextMessage(role="user", content="x" * LARGE_CONTENT_CHARS)]
    assert plan_size(big, LARGE_CONTENT_CHARS + 100) >= LARGE_CONTENT_CHARS


def test_numbers_that_grow_when_encoded_again_stay_within_the_bound() -> None:
    """Arguments given as objects are counted re-encoded: ``1e15`` (4 characters) comes
    back as ``1000000000000000.0`` (18). A frame of such numbers just under the threshold
    is still weighed as large, as the walk weighs it."""
    text = json.dumps({"messages": [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "name": "f", "arguments": {"xs": [1e15] * 2000}}]}]}).replace(
        "1000000000000000.0", "1e15")  # fmt: skip
    messages = parse_messages(json.loads(text)["messages"])
    walked = plan_size(messages)
    assert len(text) < LARGE_CONTENT_CHARS <= walked  # small frame, large once re-encoded
    assert plan_size(messages, len(text)) >= LARGE_CONTENT_CHARS


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.recursive(
            st.none()
            | st.booleans()
            | st.integers(-(2**63), 2**63 - 1)
            | st.floats(allow_nan=False, allow_infinity=False)
            | st.text(max_size=20),
            lambda inner: (
                st.lists(inner, max_size=5)
                | st.dictionaries(st.text(max_size=5), inner, max_size=5)
            ),
            max_leaves=30,
        ),
        min_size=1,
        max_size=4,
    ),
    st.text(max_size=50),
)
def test_what_the_walk_counts_is_within_the_growth_of_the_text(
    arguments: list[Any], content: str
) -> None:
    calls = [{"id": f"c{i}", "name": "f", "arguments": {"a": a}} for i, a in enumerate(arguments)]
    text = msgspec.json.encode(
        [{"role": "assistant", "content": content, "tool_calls": calls}]
    ).decode()
    messages = parse_messages(json.loads(text))
    walked = plan_size(messages) - ITEM_CHARS * len(messages)
    assert walked <= REENCODED_GROWTH * len(text)
