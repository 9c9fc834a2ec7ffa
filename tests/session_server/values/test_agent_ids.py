"""Agent ids name a folder: they must never escape it."""

from __future__ import annotations

from typing import Any

import pytest

from session_server.values.agent_ids import (
    MAX_AGENT_ID_BYTES,
    unicode_id_problem,
    validate_agent_id,
    validate_new_id,
)
from session_server.values.errors import InvalidAgentIdError, InvalidParamsError


@pytest.mark.parametrize(
    "agent_id",
    [
        "db manager_db manager_1393",  # spaces, as the reference fixtures use
        "SingleAgentXml_Tester_1436",
        "Worker_Worker_1317",
        "a",
        "agent.v2",
        "naïve-agent ☕",
        "user@example.com:main (test) #1",
        "x" * MAX_AGENT_ID_BYTES,
        "é" * (MAX_AGENT_ID_BYTES // 2),  # 2 bytes each: exactly the limit
    ],
)
def test_allowed(agent_id: str) -> None:
    assert validate_agent_id(agent_id) == agent_id


@pytest.mark.parametrize(
    ("agent_id", "problem"),
    [
        ("", "empty"),
        ("a/b", "path separator"),
        ("/etc", "path separator"),
        ("a\\b", "path separator"),
        ("..", "'..'"),
        ("../escape", "path separator"),
        ("a..b", "'..'"),
        (".", "'.'"),
        ("a\x00b", "control"),
        ("\x00", "control"),
        ("line\nbreak", "control"),
        ("tab\there", "control"),
        ("bell\x07", "control"),
        ("del\x7f", "control"),
        ("c1\x85", "control"),
        (" leading", "whitespace"),
        ("trailing ", "whitespace"),
        ("x" * (MAX_AGENT_ID_BYTES + 1), "128 bytes"),
        ("é" * (MAX_AGENT_ID_BYTES // 2 + 1), "128 bytes"),  # 130 bytes, 65 characters
        ("\ud800", "surrogate"),
    ],
)
def test_refused(agent_id: str, problem: str) -> None:
    with pytest.raises(InvalidAgentIdError) as info:
        validate_agent_id(agent_id)
    err = info.value
    assert problem in err.message
    assert err.message.startswith("agent_id")
    assert err.data == {"field": "agent_id"}
    assert err.code == -32602
    assert isinstance(err, InvalidParamsError)


@pytest.mark.parametrize("value", [None, 42, b"bytes", ["a"]])
def test_not_a_string(value: Any) -> None:
    with pytest.raises(InvalidAgentIdError, match="must be a string"):
        validate_agent_id(value)


def test_long_ids_are_truncated_in_the_message() -> None:
    with pytest.raises(InvalidAgentIdError) as info:
        validate_agent_id("x" * 10_000)
    assert len(info.value.message) < 200


def test_exactly_c0_del_and_c1_are_control_characters() -> None:
    for code in range(0x200):
        char = chr(code)
        if char in "/\\.":
            continue
        control = code < 0x20 or 0x7F <= code < 0xA0
        try:
            validate_agent_id(f"a{char}b")
        except InvalidAgentIdError as exc:
            assert control and "control" in exc.message, (code, exc.message)
        else:
            assert not control, code


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("a\u202eb", "U+202E (Cf"),  # right-to-left override
        ("a\u200bb", "U+200B (Cf"),  # zero-width space
        ("a\u2028b", "U+2028 (Zl"),
        ("a\ue000b", "U+E000 (Co"),
        ("a\U000e0001b", "U+E0001 (Cf"),  # language tag
        ("a\u0378b", "U+0378 (Cn"),  # unassigned
        ("a\uff0fb", "NFKC"),  # fullwidth solidus: looks like a/b
        ("\uff41gent", "NFKC"),  # fullwidth a
        ("a\u00a0b", "NFKC"),  # no-break space
        ("\ufb01le", "NFKC"),  # the fi ligature
    ],
)
def test_new_ids_that_could_pass_for_another_are_refused(value: str, words: str) -> None:
    problem = unicode_id_problem(value)
    assert problem is not None and words in problem, problem
    with pytest.raises(InvalidAgentIdError) as info:
        validate_new_id(validate_agent_id(value))
    assert info.value.data == {"field": "agent_id"}
    with pytest.raises(InvalidParamsError) as other:
        validate_new_id(value, "session_id")
    assert other.value.data == {"field": "session_id"} and words in other.value.message


@pytest.mark.parametrize(
    "value",
    ["agent-1", "db manager_db manager_1393", "caf\u00e9", "\u65e5\u672c\u8a9e", "\u03a9", "a b"],
)
def test_ordinary_ids_pass(value: str) -> None:
    assert unicode_id_problem(value) is None
    assert validate_new_id(validate_agent_id(value)) == value


def test_every_id_of_the_reference_fixtures_passes() -> None:
    import json

    from tests.support.paths import FIXTURES

    ids = {p.name for p in FIXTURES.rglob("*")}
    for path in FIXTURES.rglob("*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                item = json.loads(line)
            except ValueError:
                continue
            ids.update(v for k, v in item.items() if k in ("id", "turn_id") and isinstance(v, str))
    assert len(ids) > 50
    assert [i for i in ids if unicode_id_problem(i)] == []
