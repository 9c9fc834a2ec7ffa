"""The client's errors: JSON-RPC error objects and refused handshakes as the project's
exceptions; ``ConnectionLostError`` when the connection drops before an answer,
``OutcomeUnknownError`` when that leaves a write that may not be sent again in doubt, and
``ServerUnavailable`` when the server could not be reached within the reconnect budget.

All three are ``SessionServerError``s (code -32005) and ``ConnectionError``s, so code that
caught a dropped connection as an ``OSError`` keeps catching it."""

from __future__ import annotations

from typing import Any, Final

from websockets.exceptions import InvalidStatus

from ..values.errors import (
    BudgetExceededError,
    ConflictError,
    ForbiddenError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    MethodNotFoundError,
    NotFoundError,
    NotOwnerError,
    ParseError,
    SessionServerError,
    TooLargeError,
    UnavailableError,
)

__all__ = [
    "ERROR_CLASSES",
    "ConnectionLostError",
    "OutcomeUnknownError",
    "ServerUnavailable",
    "error_from",
    "handshake_error",
    "retry_after",
]

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
    data: dict[str, Any] = {"http_status": status}
    if status in (401, 403):
        return ForbiddenError(message, data=data)
    if status == 400:
        return InvalidParamsError(message, data=data)
    if status == 404:
        return NotFoundError(message, data=data)
    if status == 503:  # too many connections, or shutting down: retry later
        unavailable: dict[str, Any] = {**data, "retryable": True}
        wait = exc.response.headers.get("Retry-After", "")
        if wait.isdigit():
            unavailable["retry_after"] = int(wait)
        return UnavailableError(message, data=unavailable)
    return InternalError(message, data=data)


class ConnectionLostError(ConnectionError, SessionServerError):
    """The connection closed before an answer came (the call may or may not have run).

    For writes, ``idempotency_key`` is the key the call used: retry with it (on a new
    connection) and the write happens at most once.
    """

    code = UnavailableError.code
    idempotency_key: str | None = None

    def __init__(self, message: str, *, data: dict[str, Any] | None = None) -> None:
        SessionServerError.__init__(self, message, data=data)


class OutcomeUnknownError(ConnectionLostError):
    """A request that is not safe to send twice was sent, and its connection was lost
    before the answer: it may or may not have been applied, and the client did not send
    it again. ``data``: ``method``, ``url``, ``reason: "outcome_unknown"`` (and
    ``idempotency_key`` when the call had one). Read the state to learn what happened."""

    @classmethod
    def of(cls, method: str, url: str, cause: BaseException) -> OutcomeUnknownError:
        return cls(
            f"{method}: the connection to {url} was lost after the request was sent "
            f"({cause}); it may or may not have been applied, and it was not sent again "
            "because running it twice is not the same as running it once; read the "
            "state to see whether it ran",
            data={"method": method, "url": url, "reason": "outcome_unknown"},
        )


class ServerUnavailable(ConnectionLostError, UnavailableError):
    """The server could not be reached within the client's reconnect budget.
    ``data``: ``url``, ``waited`` (seconds), ``attempts``, ``last_error``,
    ``reason: "server_unavailable"``, ``retryable: true``."""

    @classmethod
    def after(
        cls, url: str, waited: float, attempts: int, cause: BaseException
    ) -> ServerUnavailable:
        last = str(cause) or type(cause).__name__
        return cls(
            f"server {url} unavailable: no connection after {attempts} attempt"
            f"{'s' if attempts != 1 else ''} in {waited:.1f} s (last error: {last})",
            data={
                "url": url,
                "waited": round(waited, 3),
                "attempts": attempts,
                "last_error": last,
                "reason": "server_unavailable",
                "retryable": True,
            },
        )


def retry_after(exc: BaseException) -> float:
    """The seconds a refusal asked the client to wait (``Retry-After``), else 0."""
    data = getattr(exc, "data", None)
    value = data.get("retry_after") if isinstance(data, dict) else None
    return float(value) if isinstance(value, int | float) and value >= 0 else 0.0


_UNAVAILABLE_REASONS: Final[dict[Any, type[UnavailableError]]] = {
    "budget_exceeded": BudgetExceededError,
    "not_owner": NotOwnerError,
}


def error_from(error: dict[str, Any]) -> SessionServerError:
    """The project exception for a JSON-RPC error object (``InternalError`` if unknown)."""
    code = error.get("code")
    cls = ERROR_CLASSES.get(code, InternalError) if isinstance(code, int) else InternalError
    data = error.get("data")
    if cls is UnavailableError and isinstance(data, dict):
        # -32005 is shared; the reason names the subclass (DESIGN §12).
        cls = _UNAVAILABLE_REASONS.get(data.get("reason"), UnavailableError)
    return cls(str(error.get("message", "")), data=data if isinstance(data, dict) else None)
