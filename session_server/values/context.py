"""The ephemeral working context of one request (pure).

A ``WorkingContext`` is built from a session's events, the caller adds the messages of
the new turn, and only those (``get_new_messages()``) are persisted. It is thrown away
after the request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from .codec import event_to_message as default_event_to_message
from .events import ContextMessage, SessionEvent
from .repair import repair_tool_pairing

__all__ = ["EventMapper", "WorkingContext", "build_working_context"]

EventMapper = Callable[[SessionEvent], ContextMessage | None]


def _instructions(value: str | Iterable[str] | None) -> list[str]:
    # A lone string is one instruction, not a sequence of one-character instructions.
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return list(value)


class WorkingContext:
    """Messages and system instructions for one model call.

    Construction copies its arguments (no shared mutable defaults); a single string is
    one system instruction. Messages given at construction are history;
    ``get_new_messages()`` returns only those added later with ``add_message``.
    ``base_seq`` is the session seq the context was built at (0 for a context not built
    from a session); ``token_count`` is the token count of the built history when the
    builder knew it; ``omitted_events`` is how many stored events of the session the
    context leaves out (older than its window and not covered by a summary), so a caller
    can tell a bounded window from a short history.
    """

    def __init__(
        self,
        system_instructions: str | Iterable[str] | None = None,
        messages: Iterable[ContextMessage] | None = None,
        metadata: dict[str, Any] | None = None,
        *,
        base_seq: int = 0,
        token_count: int | None = None,
        omitted_events: int = 0,
    ) -> None:
        self.system_instructions: list[str] = _instructions(system_instructions)
        self.messages: list[ContextMessage] = list(messages or [])
        self.metadata: dict[str, Any] = dict(metadata or {})
        self.base_seq = base_seq
        self.token_count = token_count
        self.omitted_events = omitted_events
        self._initial_count = len(self.messages)

    def add_message(self, message: ContextMessage) -> None:
        self.messages.append(message)

    def add_messages(self, messages: Iterable[ContextMessage]) -> None:
        self.messages.extend(messages)

    def get_new_messages(self) -> list[ContextMessage]:
        return self.messages[self._initial_count :]

    def __repr__(self) -> str:
        return (
            f"WorkingContext(base_seq={self.base_seq}, messages={len(self.messages)}, "
            f"new={len(self.messages) - self._initial_count})"
        )


def build_working_context(
    events: Sequence[SessionEvent],
    *,
    system_instructions: str | Iterable[str] | None = None,
    event_to_message: EventMapper | None = None,
    metadata: dict[str, Any] | None = None,
    base_seq: int | None = None,
    token_count: int | None = None,
) -> WorkingContext:
    """Map events (oldest first) to messages; a mapper returning ``None`` skips an event.

    The tool pairing of the messages is repaired (``values.repair.repair_tool_pairing``),
    so the context renders for every adapter whatever the events hold. ``base_seq`` defaults to the highest seq among ``events`` (0 when there are none).
    """
    mapper = event_to_message or default_event_to_message
    mapped = [(m, e.turn) for m, e in ((mapper(e), e) for e in events) if m is not None]
    messages = repair_tool_pairing([m for m, _ in mapped], turns=[t for _, t in mapped])
    if base_seq is None:
        base_seq = max((e.seq for e in events), default=0)
    return WorkingContext(
        system_instructions,
        messages,
        metadata,
        base_seq=base_seq,
        token_count=token_count,
    )
