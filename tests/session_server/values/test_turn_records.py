"""The cluster log's values: agent ids as subject tokens, entries, which statements write."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from session_server.values.turn_records import (
    OwnerEntry,
    OwnerMarker,
    Statement,
    TurnRecord,
    agent_from_token,
    agent_token,
    decode_entry,
    decode_owner,
    encode_marker,
    encode_owner,
    encode_record,
    writes,
)

TOKEN = re.compile(r"[A-Za-z0-9_=-]+")


@given(st.text(min_size=1, max_size=64), st.text(min_size=1, max_size=64))
def test_agent_tokens_are_one_to_one_and_valid_subject_tokens(a: str, b: str) -> None:
    assert TOKEN.fullmatch(agent_token(a))
    assert (agent_token(a) == agent_token(b)) == (a == b)


def test_plain_ids_stay_readable() -> None:
    assert agent_token("agent-7_x") == "agent-7_x"
    assert agent_token("a.b c") == "a=2Eb=20c"
    assert agent_token("=") == "=3D"


@given(st.text(min_size=1, max_size=64))
def test_an_agent_token_gives_back_its_agent_id(agent_id: str) -> None:
    assert agent_from_token(agent_token(agent_id)) == agent_id


@pytest.mark.parametrize("token", ["a=2", "a=2e", "a=ZZ", "a.b", "a b", "=FF"])
def test_a_token_agent_token_cannot_have_made_is_refused(token: str) -> None:
    with pytest.raises((ValueError, UnicodeDecodeError)):
        agent_from_token(token)


params = st.one_of(
    st.none(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20),
)


@given(st.lists(st.tuples(st.text(min_size=1, max_size=40), st.lists(params, max_size=5))))
def test_records_round_trip_exactly(statements: list[tuple[str, list[object]]]) -> None:
    record = TurnRecord("append_events", 12345, [Statement(sql, p) for sql, p in statements])
    assert decode_entry(encode_record(record)) == record


def test_markers_and_owner_entries_round_trip() -> None:
    marker = OwnerMarker("node1", 3)
    assert decode_entry(encode_marker(marker)) == marker
    entry = OwnerEntry("node1", "ws://h:1", 4)
    assert decode_owner(encode_owner(entry)) == entry


@pytest.mark.parametrize("data", [b"", b"X123", b"R\xc1", b"M{"])
def test_unreadable_entries_are_refused(data: bytes) -> None:
    with pytest.raises(ValueError):
        decode_entry(data)


@pytest.mark.parametrize(
    ("sql", "expected"),
    [
        ("SELECT 1", False),
        ("  select * from events", False),
        ("PRAGMA user_version", False),
        ("-- a comment\nSELECT 1", False),
        ("INSERT INTO t VALUES (1)", True),
        ("WITH x AS (SELECT 1) INSERT INTO t SELECT * FROM x", True),
        ("UPDATE t SET a = 1", True),
        ("DELETE FROM t", True),
        ("INSERT INTO recall(recall) VALUES ('optimize')", True),
    ],
)
def test_which_statements_are_recorded(sql: str, expected: bool) -> None:
    assert writes(sql) is expected
