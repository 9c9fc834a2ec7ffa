"""``turn.persist`` has one params schema, the model ``PersistParams`` (``rpc/params``),
as every other method: no shortcut beside it."""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec
import pydantic
import pytest

from session_server.rpc.method_spec import MethodSpec
from session_server.rpc.params import PersistParams
from session_server.rpc.table import BUILTIN_METHODS
from session_server.values.errors import InvalidParamsError
from tests.support.server import turn_messages

MESSAGES = msgspec.to_builtins(turn_messages(3))


def test_every_method_has_one_params_schema() -> None:
    assert "fast" not in {field.name for field in dataclasses.fields(MethodSpec)}
    assert BUILTIN_METHODS["turn.persist"].params is PersistParams


@pytest.mark.parametrize(
    "raw",
    [
        {"session_id": "s", "messages": MESSAGES},
        {"session_id": "s", "messages": []},
        {"session_id": "s", "messages": MESSAGES, "base_seq": 0, "idempotency_key": "k"},
        {"session_id": "s" * 256, "messages": MESSAGES, "base_seq": 12, "usage": {"x": 1}},
        {"session_id": "s", "messages": MESSAGES, "idempotency_key": None, "usage": None},
    ],
)
def test_a_valid_request_gets_its_fields(raw: dict[str, Any]) -> None:
    model = PersistParams.model_validate(raw)
    assert model.session_id == raw["session_id"]
    assert msgspec.to_builtins(model.messages) == raw["messages"]
    for name in ("base_seq", "idempotency_key", "usage", "strategy"):
        assert getattr(model, name) == raw.get(name)


@pytest.mark.parametrize(
    "raw",
    [
        {"session_id": "", "messages": MESSAGES},  # too short
        {"session_id": "s" * 257, "messages": MESSAGES},  # too long
        {"session_id": 5, "messages": MESSAGES},
        {"session_id": "s", "messages": MESSAGES, "base_seq": -1},
        {"session_id": "s", "messages": MESSAGES, "base_seq": True},
        {"session_id": "s", "messages": MESSAGES, "idempotency_key": ""},
        {"session_id": "s", "messages": MESSAGES, "usage": [1]},
        {"session_id": "s", "messages": MESSAGES, "unknown": 1},
        {"session_id": "s", "messages": [{"role": "nobody", "content": "x"}]},
        {"session_id": "s", "messages": "not a list"},
        {"messages": MESSAGES},
    ],
)
def test_anything_else_is_refused(raw: dict[str, Any]) -> None:
    # pydantic's wording (dispatch turns it into -32602), or the messages' own check.
    with pytest.raises((pydantic.ValidationError, InvalidParamsError)):
        PersistParams.model_validate(raw)


def test_a_request_strategy_is_kept() -> None:
    raw = {"session_id": "s", "messages": MESSAGES, "strategy": {"mode": "none"}}
    assert PersistParams.model_validate(raw).strategy == {"mode": "none"}
