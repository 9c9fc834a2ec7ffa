"""The front door's pure rules: the node credential, the owner's agent URL, what to do
when a forwarded connection's upstream ends, and spotting a ``not_owner`` answer."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from session_server.rpc.protocol import error_response
from session_server.values.errors import NotFoundError, NotOwnerError, UnavailableError
from session_server.values.forwarding import (
    CLOSE_TRY_AGAIN,
    UpstreamEnd,
    after_upstream_end,
    agent_url,
    credential_valid,
    forward_credential,
    not_owner_answer,
)

SECRET = b"s" * 32
OTHER = b"t" * 32


@given(st.text(min_size=1, max_size=64), st.text(min_size=1, max_size=64))
def test_a_credential_is_valid_for_its_agent_and_secret_only(agent: str, other: str) -> None:
    credential = forward_credential(SECRET, agent)
    assert credential_valid(SECRET, agent, credential)
    assert not credential_valid(OTHER, agent, credential)
    assert not credential_valid(None, agent, credential)
    if other != agent:
        assert not credential_valid(SECRET, other, credential)


def test_a_short_secret_is_refused() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        forward_credential(b"short", "a")
    assert not credential_valid(b"short", "a", "00")


def test_agent_url_quotes_the_agent_id() -> None:
    assert agent_url("ws://h:1/", "a b/c") == "ws://h:1/v1/agents/a%20b%2Fc"


@pytest.mark.parametrize(
    ("code", "reason", "not_owner", "expected"),
    [
        (1008, "token expired", False, UpstreamEnd(False, 1008, "token expired")),
        (1000, "idle timeout", False, UpstreamEnd(False, 1000, "idle timeout")),
        (1001, "server shutting down", False, None),
        (1011, "", False, None),
        (None, "", False, None),
        (1000, "", True, None),
        (1008, "token expired", True, None),
    ],
)
def test_after_upstream_end(
    code: int | None, reason: str, not_owner: bool, expected: UpstreamEnd | None
) -> None:
    end = after_upstream_end(code, reason, not_owner)
    if expected is not None:
        assert end == expected
    else:
        assert end.forget and end.code == CLOSE_TRY_AGAIN and "reconnect" in end.reason


def encoded(message: object) -> bytes:
    return msgspec.json.encode(message)


def not_owner() -> dict[str, object]:
    return error_response(1, NotOwnerError("x", data={"reason": "not_owner", "retryable": True}))


def test_not_owner_answers_are_spotted_alone_or_in_a_batch() -> None:
    assert not_owner_answer(encoded(not_owner()))
    assert not_owner_answer(encoded(not_owner()).decode())
    ok = {"jsonrpc": "2.0", "id": 2, "result": {"x": "not_owner"}}
    assert not_owner_answer(encoded([ok, not_owner()]))
    assert not not_owner_answer(encoded(ok))
    other = error_response(3, UnavailableError("x", data={"reason": "not_owner_x"}))
    assert not not_owner_answer(encoded(other))
    missing = error_response(3, NotFoundError("not_owner", data={"reason": "not_owner"}))
    assert not not_owner_answer(encoded(missing))
    note = {"jsonrpc": "2.0", "method": "events.appended", "params": {"t": "not_owner"}}
    assert not not_owner_answer(encoded(note))
    assert not not_owner_answer(b'{"not_owner"')  # not JSON: not an answer


@given(st.text(max_size=200))
def test_any_text_event_is_not_a_not_owner_answer(content: str) -> None:
    note = {"jsonrpc": "2.0", "method": "events.appended", "params": {"content": content}}
    assert not not_owner_answer(encoded(note))
