"""The exception hierarchy: one root, a JSON-RPC code on every class."""

from __future__ import annotations

import inspect

import pytest

from session_server.values import errors
from session_server.values.errors import (
    AgentUnavailableError,
    BudgetExceededError,
    ConflictError,
    CorruptRecordError,
    ForbiddenError,
    InternalError,
    InvalidAgentIdError,
    InvalidParamsError,
    InvalidRequestError,
    MemoryDirInUseError,
    MethodNotFoundError,
    NotFoundError,
    NotOwnerError,
    ParseError,
    RenderError,
    SessionServerError,
    StorageError,
    SummarizerError,
    TooLargeError,
    UnavailableError,
)

EXPECTED_CODES = {
    ParseError: -32700,
    InvalidRequestError: -32600,
    MethodNotFoundError: -32601,
    InvalidParamsError: -32602,
    InternalError: -32603,
    NotFoundError: -32001,
    ConflictError: -32002,
    ForbiddenError: -32003,
    TooLargeError: -32004,
    UnavailableError: -32005,
    # Subclasses inherit the code of the class they refine.
    InvalidAgentIdError: -32602,
    RenderError: -32602,
    StorageError: -32603,
    CorruptRecordError: -32603,
    AgentUnavailableError: -32603,
    SummarizerError: -32603,
    MemoryDirInUseError: -32603,
    BudgetExceededError: -32005,  # DESIGN §12: -32005 with data.reason "budget_exceeded"
    NotOwnerError: -32005,  # cluster mode: -32005 with data.reason "not_owner"
}


@pytest.mark.parametrize("cls", list(EXPECTED_CODES), ids=lambda c: c.__name__)
def test_each_class_carries_its_jsonrpc_code(cls: type[SessionServerError]) -> None:
    assert cls.code == EXPECTED_CODES[cls]
    err = cls("something was wrong")
    assert err.code == EXPECTED_CODES[cls]
    assert isinstance(err, SessionServerError)
    assert isinstance(err, Exception)


def test_root_defaults_to_internal_error_code() -> None:
    assert SessionServerError.code == -32603


def test_every_exported_error_is_rooted_in_session_server_error() -> None:
    exported = [getattr(errors, name) for name in errors.__all__]
    classes = [c for c in exported if inspect.isclass(c)]
    assert len(classes) == len(errors.__all__)
    for cls in classes:
        assert issubclass(cls, SessionServerError), cls
    # The table above covers every exported class except the root.
    assert set(classes) - {SessionServerError} == set(EXPECTED_CODES)


def test_refinements_are_caught_by_their_base() -> None:
    assert issubclass(InvalidAgentIdError, InvalidParamsError)
    assert issubclass(RenderError, InvalidParamsError)
    for cls in (StorageError, CorruptRecordError, AgentUnavailableError, SummarizerError):
        assert issubclass(cls, InternalError)
    with pytest.raises(InvalidParamsError):
        raise InvalidAgentIdError("agent_id: bad")


def test_message_and_data_are_kept() -> None:
    err = ConflictError("session moved on", data={"last_seq": 7})
    assert str(err) == "session moved on"
    assert err.message == "session moved on"
    assert err.data == {"last_seq": 7}


def test_to_jsonrpc_with_data() -> None:
    err = ConflictError("session moved on", data={"last_seq": 7})
    assert err.to_jsonrpc() == {
        "code": -32002,
        "message": "session moved on",
        "data": {"last_seq": 7},
    }


def test_to_jsonrpc_without_data_has_no_data_key() -> None:
    assert NotFoundError("session 's1' not found").to_jsonrpc() == {
        "code": -32001,
        "message": "session 's1' not found",
    }


def test_data_is_keyword_only() -> None:
    with pytest.raises(TypeError):
        InvalidParamsError("x", {"field": "x"})  # type: ignore[call-arg]
