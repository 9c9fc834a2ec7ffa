"""Event and message value types (pure).

``SessionEvent`` is one row of a session's log; ``ContextMessage`` is one entry of a
working context, close to the OpenAI chat message shape. Both are ``msgspec.Struct``s
that omit unset optional fields when encoded, so ``msgspec.to_builtins`` gives only the
keys that are set; ``role``/``content`` of a message and ``action``/``content`` of an
event are always present.

They are not tracked by the cyclic garbage collector (``gc=False``): they hold only JSON
values, so they take part in no reference cycle, and a server holds many of them (the
recent-events cache): with 32 concurrent writers the collector's share of the CPU time
fell from 16% to 7% (measured with ``gc.callbacks``).
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec

__all__ = [
    "ACTIONS",
    "ROLES",
    "Action",
    "ContextMessage",
    "Role",
    "SessionEvent",
    "ToolArguments",
    "ToolCall",
]

Action = Literal[
    "user_message",
    "agent_message",
    "tool_call_request",
    "tool_result",
    "system_instruction",
    "compaction",
]
Role = Literal["system", "user", "assistant", "tool"]

ACTIONS: Final[tuple[str, ...]] = (
    "user_message",
    "agent_message",
    "tool_call_request",
    "tool_result",
    "system_instruction",
    "compaction",
)
ROLES: Final[tuple[str, ...]] = ("system", "user", "assistant", "tool")


ToolArguments = dict[str, Any] | list[Any] | str | int | float | bool | None
"""Tool call arguments as the model sent them: usually an object, but a model may send
malformed JSON (kept as the string it sent) or a JSON value that is not an object. They
are stored and returned unchanged; the adapters render them faithfully
(``values.codec.arguments_text`` / ``arguments_object``)."""


class ToolCall(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """One function call requested by the model.

    ``arguments`` is normally an object; anything else a model sent (a string that is not
    valid JSON, an array, a number) is kept as it came, never refused.
    """

    id: str
    name: str
    arguments: ToolArguments = msgspec.field(default_factory=dict)


class ContextMessage(
    msgspec.Struct, frozen=True, omit_defaults=True, forbid_unknown_fields=True, gc=False
):
    """One message of a working context.

    ``compacted`` marks a message whose payload a compaction replaced by a placeholder;
    ``synthetic`` marks a message the builder made up to repair a stored history (a
    result for a call that never got one; see ``values.repair``), never a stored one;
    ``is_error`` marks a tool result that reports a failure; ``images`` are image URLs
    (``data:`` URLs included); ``reasoning`` is kept for the record and never sent to a
    provider by the adapters.

    Frozen: a built context's messages are shared with the actor's recent-events cache
    (each cached event is converted once), so a caller changes a message by replacing it
    (``msgspec.structs.replace``), never in place; its lists and dicts are shared too.
    """

    role: Role
    # A factory default (not ``= ""``) keeps ``content`` in the encoded form even when empty:
    # ``omit_defaults`` drops only plain defaults, and ``content`` is never "unset".
    content: str = msgspec.field(default_factory=str)
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[ToolCall] | None = None
    metadata: dict[str, Any] | None = None
    reasoning: str | None = None
    images: list[str] | None = None
    is_error: bool = False
    compacted: bool = False
    synthetic: bool = False


class SessionEvent(msgspec.Struct, omit_defaults=True, forbid_unknown_fields=True, gc=False):
    """One event of a session's log.

    Common fields: ``id, session_id, seq, timestamp (ms), action, content``. Per action:
    ``model`` (agent_message), ``tool_calls`` (tool_call_request), ``tool_call_id,
    tool_name, is_success`` (tool_result), ``compacted_event_count`` and ``compaction``
    (the compaction record). ``metadata`` holds any other keys of the stored metadata.
    ``turn`` and ``token_count`` are filled in by the store on write.
    """

    id: str = ""
    session_id: str = ""
    seq: int = 0
    timestamp: int = 0
    # Factory defaults keep ``action`` and ``content`` in the encoded form even when they
    # equal their defaults (``omit_defaults`` drops only plain defaults): a client reading
    # an event always finds them.
    action: Action = msgspec.field(default_factory=lambda: "user_message")
    content: str = msgspec.field(default_factory=str)
    model: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    is_success: bool | None = None
    compacted_event_count: int | None = None
    compaction: dict[str, Any] | None = None
    reasoning: str | None = None
    images: list[str] | None = None
    metadata: dict[str, Any] | None = None
    turn: int | None = None
    token_count: int | None = None
