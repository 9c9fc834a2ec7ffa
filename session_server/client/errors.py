"""The client's errors: JSON-RPC error objects and refused handshakes as the project's
exceptions, and ``ConnectionLostError`` when the connection drops before an answer."""

from __future__ import annotations

from typing import Any, Final

from websockets.exceptions import InvalidStatus

from ..core.errors import (
    ConflictError,
    ForbiddenError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    MethodNotFoundError,
    NotFoundError,
    ParseError,
    SessionServerError,
    TooLargeError,
    UnavailableError,
)

__all__ = ["ERROR_CLASSES", "ConnectionLostError", "error_from", "handshake_error"]

ERROR_CLASSES: Final[dict[int, type[SessionServerError]]] = {
    cls.code: cls
    for cls in (
        ParseError,
        InvalidRequestError,
        MethodNotFoundError,
        InvalidParamsError,
        InternalError,
        NotFoundError,
        ConflictError,
        ForbiddenError,
        TooLargeError,
        UnavailableError,
    )
}


def handshake_error(exc: InvalidStatus) -> SessionServerError:
    status = exc.response.status_code
    body = exc.response.body.decode("utf-8", "replace").strip() if exc.response.body else ""
    message = f"handshake refused with HTTP {status}" + (f": {body}" if body else "")
    data = {"http_status": status}
    if status in (401, 403):
        return ForbiddenError(message, data=data)
    if status == 400:
        return InvalidParamsError(message, data=data)
    if status == 404:
        return NotFoundError(message, data=data)
    if status == 503:  # too many connections, or shutting down: retry later
        return UnavailableError(message, data={**data, "retryable": True})
    return InternalError(message, data=data)


class ConnectionLostError(ConnectionError):
    """The connection closed before an answer came (the call may or may not have run).

    For writes, ``idempotency_key`` is the key the call used: retry with it (on a new
    connection) and the write happens at most once.
    """

    idempotency_key: str | None = None


def error_from(error: dict[str, Any]) -> SessionServerError:
    """The project exception for a JSON-RPC error object (``InternalError`` if unknown)."""
    code = error.get("code")
    cls = ERROR_CLASSES.get(code, InternalError) if isinstance(code, int) else InternalError
    data = error.get("data")
    return cls(str(error.get("message", "")), data=data if isinstance(data, dict) else None)
