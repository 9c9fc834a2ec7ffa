"""``persist_params_fast``: the hot path's params of a plainly valid ``turn.persist``
(``rpc/params``) hold what the model would, and anything else is left to the model."""

from __future__ import annotations

from typing import Any

import msgspec
import pydantic
import pytest

from session_server.core.errors import InvalidParamsError
from session_server.rpc.params import PersistParams, PersistRequest, persist_params_fast
from tests.support.server import turn_messages

MESSAGES = msgspec.to_builtins(turn_messages(3))


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
def test_a_plainly_valid_request_gets_the_models_fields(raw: dict[str, Any]) -> None:
    fast = persist_params_fast(raw)
    model = PersistParams.model_validate(raw)
    assert isinstance(fast, PersistRequest)
    fields = list(PersistParams.model_fields)
    assert fields == list(PersistRequest.__struct_fields__)
    assert [getattr(fast, f) for f in fields] == [getattr(model, f) for f in fields]


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
def test_anything_else_is_left_to_the_model_which_refuses_it(raw: dict[str, Any]) -> None:
    assert persist_params_fast(raw) is None
    # The model words the refusal: pydantic's, or the messages' own check.
    with pytest.raises((pydantic.ValidationError, InvalidParamsError)):
        PersistParams.model_validate(raw)


def test_a_request_strategy_is_left_to_the_model_which_keeps_it() -> None:
    raw = {"session_id": "s", "messages": MESSAGES, "strategy": {"mode": "none"}}
    assert persist_params_fast(raw) is None
    assert PersistParams.model_validate(raw).strategy == {"mode": "none"}
