"""The client's choice of node among several URLs (pure)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from session_server.client.failover import endpoint_urls, moves_on, next_index, round_done


def test_endpoint_urls_of_one_or_several_nodes() -> None:
    assert endpoint_urls("ws://a:1/", "x y") == ("ws://a:1/v1/agents/x%20y",)
    assert endpoint_urls(["ws://a:1", "wss://b:2"], None) == ("ws://a:1/v1", "wss://b:2/v1")
    with pytest.raises(ValueError, match="at least one"):
        endpoint_urls([], "x")
    with pytest.raises(ValueError, match="not a ws"):
        endpoint_urls(["ws://a:1", "http://b"], "x")


@given(st.integers(1, 8), st.integers(0, 100))
def test_a_round_visits_every_node_once_then_waits(count: int, start: int) -> None:
    index = start % count
    seen = []
    for attempt in range(count):
        seen.append(index)
        index = next_index(index, count)
        assert round_done(attempt, count) == (attempt == count - 1)
    assert sorted(seen) == list(range(count))
    assert index == start % count


def test_only_a_retryable_not_owner_refusal_moves_on() -> None:
    assert moves_on({"reason": "not_owner", "retryable": True})
    assert not moves_on({"reason": "not_owner"})
    assert not moves_on({"reason": "server_busy", "retryable": True})
    assert not moves_on(None)
