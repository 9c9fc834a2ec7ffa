"""One exception hierarchy for the whole project.

Every error carries the JSON-RPC code it maps to (``code``) and optional structured
``data`` that the server puts in the error object. Messages say what was wrong and,
where a field is to blame, name it.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "AgentUnavailableError",
    "BudgetExceededError",
    "ConflictError",
    "CorruptRecordError",
    "ForbiddenError",
    "InternalError",
    "InvalidAgentIdError",
    "InvalidParamsError",
    "InvalidRequestError",
    "MemoryDirInUseError",
    "MethodNotFoundError",
    "NotFoundError",
    "NotOwnerError",
    "ParseError",
    "RenderError",
    "SessionServerError",
    "StorageError",
    "SummarizerError",
    "TooLargeError",
    "UnavailableError",
]


class SessionServerError(Exception):
    """Root of every error this project raises on purpose.

    ``code`` is the JSON-RPC error code; ``data`` is JSON-serialisable detail
    (for example the current ``last_seq`` of a conflict).
    """

    code: ClassVar[int] = -32603

    def __init__(self, message: str, *, data: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.data = data

    def to_jsonrpc(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


class ParseError(SessionServerError):
    code = -32700


class InvalidRequestError(SessionServerError):
    code = -32600


class MethodNotFoundError(SessionServerError):
    code = -32601


class InvalidParamsError(SessionServerError):
    """A value supplied by the caller is invalid; the message names the field."""

    code = -32602


class InvalidAgentIdError(InvalidParamsError):
    """The agent id could name a path outside the memory dir, or is too long."""


class RenderError(InvalidParamsError):
    """A context cannot be expressed in a provider's format (message index named)."""


class InternalError(SessionServerError):
    code = -32603


class StorageError(InternalError):
    """SQLite or the file system refused an operation (disk full, I/O error)."""


class CorruptRecordError(InternalError):
    """A stored row or file cannot be decoded (for example invalid metadata JSON)."""


class AgentUnavailableError(InternalError):
    """The agent's database file is corrupt or not a SQLite file; only that agent fails."""


class MemoryDirInUseError(InternalError):
    """Another server holds the memory dir (its ``server.lock``); this one refuses to start."""


class SummarizerError(InternalError):
    """The summarizer failed or answered something unusable; nothing was written."""


class NotFoundError(SessionServerError):
    code = -32001

    @classmethod
    def session(cls, session_id: str) -> NotFoundError:
        """The one wording and data shape for an unknown session."""
        return cls(
            f"session_id: session {session_id!r} not found",
            data={"field": "session_id", "session_id": session_id},
        )

    @classmethod
    def agent(cls, agent_id: str) -> NotFoundError:
        """The one wording and data shape for an agent that has no store (reads never
        create one)."""
        return cls(
            f"agent_id: agent {agent_id!r} not found (it has no sessions; a write such as "
            "session.create makes it)",
            data={"field": "agent_id", "agent_id": agent_id},
        )


class ConflictError(SessionServerError):
    """The session moved on (``data["last_seq"]`` is the current last seq), or an id exists."""

    code = -32002


class ForbiddenError(SessionServerError):
    code = -32003


class TooLargeError(SessionServerError):
    code = -32004


class UnavailableError(SessionServerError):
    """A resource is exhausted for now (for example no free file descriptor); the same
    call may succeed later. ``data["retryable"]`` is true and ``data["reason"]`` names it."""

    code = -32005


class BudgetExceededError(UnavailableError):
    """A session (or its agent) is past its usage budget: ``context.build`` and
    ``context.render`` refuse until the budget is raised or the request says
    ``override_budget: true``. Shares -32005 with ``UnavailableError`` (DESIGN §12);
    ``data["reason"]`` is ``"budget_exceeded"`` and ``data["retryable"]`` false."""


class NotOwnerError(UnavailableError):
    """In cluster mode, this node does not (or no longer) own the agent: another node
    claimed it, or a fenced append of this node was refused as stale. Shares -32005
    with ``UnavailableError``; ``data["reason"]`` is ``"not_owner"``, ``data["retryable"]``
    true, ``data["agent_id"]`` names the agent and ``data["owner"]`` (when known) is
    ``{node_id, url, generation}``. Front doors retry it at the owner; clients retry it
    elsewhere."""
