"""JSON-RPC framing, envelope validation, response builders and error formatting (pure)."""

from __future__ import annotations

import json
import subprocess
import sys

import msgspec
import pydantic
import pytest

from session_server.rpc.protocol import (
    Invalid,
    Request,
    encode_message,
    error_response,
    format_validation_error,
    notification,
    parse_frame,
    result_response,
    validation_error_field,
)
from session_server.values.errors import (
    InvalidParamsError,
    InvalidRequestError,
    NotFoundError,
    ParseError,
)
from session_server.values.events import SessionEvent


def test_single_request_parses() -> None:
    frame = parse_frame(
        '{"jsonrpc":"2.0","id":7,"method":"session.get","params":{"session_id":"s"}}'
    )
    assert not frame.batch
    assert frame.items == [Request("session.get", {"session_id": "s"}, 7, False)]


def test_notification_has_no_id_and_absent_params_become_empty() -> None:
    frame = parse_frame(b'{"jsonrpc":"2.0","method":"session.list"}')
    assert frame.items == [Request("session.list", {}, None, True)]


def test_null_id_is_a_request_not_a_notification() -> None:
    (item,) = parse_frame('{"jsonrpc":"2.0","id":null,"method":"m"}').items
    assert isinstance(item, Request)
    assert item.id is None
    assert not item.notification


def test_batch_keeps_order_and_marks_invalid_items() -> None:
    frame = parse_frame(
        json.dumps(
            [
                {"jsonrpc": "2.0", "id": "a", "method": "x"},
                5,
                {"jsonrpc": "1.0", "id": 2, "method": "y"},
                {"jsonrpc": "2.0", "method": "z"},
            ]
        )
    )
    assert frame.batch
    first, second, third, fourth = frame.items
    assert first == Request("x", {}, "a", False)
    assert isinstance(second, Invalid) and second.id is None
    assert isinstance(second.error, InvalidRequestError)
    assert "expected a JSON object, got number" in second.error.message
    assert isinstance(third, Invalid) and third.id == 2
    assert 'jsonrpc must be "2.0"' in third.error.message
    assert fourth == Request("z", {}, None, True)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("{not json", "Parse error"),
        ("", "Parse error"),
        (b"\xff\xfe{}", "not valid UTF-8"),
        # Found by the fault suite's fuzzer: deep nesting raised RecursionError, unanswered.
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"a":' * 100_000 + "1" + "}" * 100_000, "nested too deeply"),
        (b"[" * 100_000, "nested too deeply"),
    ],
)
def test_parse_errors(text: str | bytes, needle: str) -> None:
    with pytest.raises(ParseError) as info:
        parse_frame(text)
    assert needle in info.value.message
    assert info.value.code == -32700


def test_empty_batch_is_an_invalid_request() -> None:
    with pytest.raises(InvalidRequestError) as info:
        parse_frame("[]")
    assert info.value.code == -32600


@pytest.mark.parametrize(
    ("obj", "needle", "code"),
    [
        ({"jsonrpc": "2.0", "id": 1}, "method is missing", -32600),
        ({"jsonrpc": "2.0", "id": 1, "method": 5}, "method must be a non-empty string", -32600),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "m"}, "id must be", -32600),
        ({"jsonrpc": "2.0", "id": True, "method": "m"}, "id must be", -32600),
        ({"jsonrpc": "2.0", "id": 1, "method": "m", "extra": 1}, "unknown member 'extra'", -32600),
        (
            {"jsonrpc": "2.0", "id": 1, "method": "m", "params": [1]},
            "params: must be an object",
            -32602,
        ),
        ({"id": 1, "method": "m"}, 'jsonrpc must be "2.0"', -32600),
    ],
)
def test_envelope_errors(obj: dict[str, object], needle: str, code: int) -> None:
    (item,) = parse_frame(json.dumps(obj)).items
    assert isinstance(item, Invalid)
    assert needle in item.error.message
    assert item.error.code == code


def test_invalid_params_of_a_notification_is_marked_silent() -> None:
    (item,) = parse_frame('{"jsonrpc":"2.0","method":"m","params":3}').items
    assert isinstance(item, Invalid)
    assert item.notification
    assert isinstance(item.error, InvalidParamsError)


def test_builders_and_encoding() -> None:
    event = SessionEvent(id="e1", session_id="s", seq=1, action="user_message", content="hé")
    ok = result_response(3, {"events": [event]})
    assert json.loads(encode_message(ok)) == {
        "jsonrpc": "2.0",
        "id": 3,
        "result": {"events": [msgspec.to_builtins(event)]},
    }
    err = error_response("x", NotFoundError("session 's' not found", data={"session_id": "s"}))
    assert json.loads(encode_message([err])) == [
        {
            "jsonrpc": "2.0",
            "id": "x",
            "error": {
                "code": -32001,
                "message": "session 's' not found",
                "data": {"session_id": "s"},
            },
        }
    ]
    assert notification("events.appended", {"session_id": "s"}) == {
        "jsonrpc": "2.0",
        "method": "events.appended",
        "params": {"session_id": "s"},
    }


class _Inner(pydantic.BaseModel):
    content: str


class _Params(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True)
    session_id: str
    limit: int = 1
    items: list[_Inner] = []


def test_validation_errors_name_the_field_path() -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        _Params.model_validate({"limit": "3", "items": [{"content": "a"}, {"content": 5}], "zz": 1})
    text = format_validation_error(info.value)
    assert "params.session_id: Field required" in text
    assert "params.limit: Input should be a valid integer" in text
    assert "params.items[1].content: Input should be a valid string" in text
    assert "params.zz: Unknown field" in text
    assert validation_error_field(info.value) == "params.session_id"


def test_framing_and_auth_modules_do_not_import_io_libraries() -> None:
    code = (
        "import sys\n"
        "import session_server.rpc, session_server.rpc.protocol, session_server.rpc.methods\n"
        "import session_server.auth\n"
        "bad = [m for m in ('asyncio', 'websockets', 'aiosqlite') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_params_nested_too_deep_are_invalid_params_naming_the_field() -> None:
    from session_server.rpc.protocol import Invalid as InvalidItem
    from session_server.values.json_depth import MAX_JSON_DEPTH

    value: object = 1
    for _ in range(MAX_JSON_DEPTH):
        value = [value]
    frame = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "m", "params": {"x": value}})
    (item,) = parse_frame(frame).items
    assert isinstance(item, InvalidItem) and item.id == 7
    assert item.error.code == -32602
    assert item.error.data is not None
    assert item.error.data["field"] == "params.x" + "[0]" * (MAX_JSON_DEPTH - 1)
    within = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "m", "params": {"x": value[0]}})  # type: ignore[index]
    assert not isinstance(parse_frame(within).items[0], InvalidItem)
