"""``_plan_size`` (``runtime/session_writes``): what a write weighs before it is planned
on the event loop or on a worker, and the bound the RPC layer gives it."""

from __future__ import annotations

from typing import Any

import pytest

from session_server.core.events import ContextMessage, ToolCall
from session_server.runtime import session_writes
from session_server.runtime.off_loop import LARGE_CONTENT_CHARS
from session_server.runtime.session_writes import ITEM_CHARS, _plan_size

TURN = [
    ContextMessage(role="user", content="what is the weather?"),
    ContextMessage(
        role="assistant", content="", tool_calls=[ToolCall("c1", "weather", {"city": "Oslo"})]
    ),
]
CHARS = len("what is the weather?") + len('{"city":"Oslo"}')


def test_without_a_bound_the_characters_are_counted() -> None:
    assert _plan_size(TURN) == 2 * ITEM_CHARS + CHARS


def test_a_bound_that_keeps_the_turn_small_is_taken_without_a_walk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def walked(items: Any) -> int:
        raise AssertionError("the characters were walked")

    monkeypatch.setattr(session_writes, "_content_chars", walked)
    bound = 300  # the frame's size: at least the characters it carries
    size = _plan_size(TURN, bound)
    assert size == 2 * ITEM_CHARS + bound
    assert bound >= CHARS and size < LARGE_CONTENT_CHARS  # small, as the walk says


def test_a_bound_past_the_threshold_does_not_make_a_small_turn_large() -> None:
    # A large frame may carry a small turn (large instructions, say): then the walk decides.
    assert _plan_size(TURN, LARGE_CONTENT_CHARS) == 2 * ITEM_CHARS + CHARS


def test_a_large_turn_is_large_whatever_its_bound() -> None:
    big = [ContextMessage(role="user", content="x" * LARGE_CONTENT_CHARS)]
    assert _plan_size(big, LARGE_CONTENT_CHARS + 100) >= LARGE_CONTENT_CHARS
