"""Validation of messages a caller hands over as values, not JSON (pure).

``check_messages(messages)`` answers as ``[parse_message(msgspec.to_builtins(m),
f"messages[{i}]") ...]``, the check of a local ``persist_working_context`` (the RPC
layer's messages were parsed from JSON already): equal messages, the same refusals. A
message whose every field already has its exact type (``str``, ``bool``, lists, dicts
with ``str`` keys, JSON scalars; no subclass, tuple or other object anywhere) comes out
of that round trip equal, with fresh containers: it is checked here directly, and comes
back as it is when it holds no container (its caller maps it to events at once), else as
a copy with fresh containers. The round trip was 45k of the 107k instructions of
``prepare_turn`` for a 4-message turn under callgrind, this 27k. Anything else (a wrong
type, a refusal, a subclass, a deep or large value) takes the round trip itself, so every
refusal, message and field path comes from ``parse_message``, unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import msgspec

from ..values.events import ROLES, ContextMessage, ToolCall
from ..values.validation import parse_message

__all__ = ["check_messages"]

_ROLES: Final = frozenset(ROLES)
_SCALARS: Final = (str, int, float, bool, type(None))
# A value copied here has at most this many containers and items, nested at most this
# deep: past that the round trip (C code) is cheaper, and the copy stays bounded.
_MAX_ITEMS: Final = 256
_MAX_DEPTH: Final = 16


class _NotPlain(Exception):
    """A value the direct copy does not handle: take the round trip."""


def check_messages(
    messages: Sequence[ContextMessage], where: str = "messages"
) -> list[ContextMessage]:
    """Each message checked as ``parse_message`` checks its builtins form (module doc)."""
    out: list[ContextMessage] = []
    for i, message in enumerate(messages):
        try:
            out.append(_plain_message(message))
            continue
        except _NotPlain:
            pass
        # Outside the handler: a refusal does not carry ``_NotPlain`` as its context.
        out.append(parse_message(msgspec.to_builtins(message), f"{where}[{i}]"))
    return out


def _plain_message(m: ContextMessage) -> ContextMessage:
    """``m`` if it equals its round trip and holds no container, else a copy of it with
    fresh containers equal to the round trip's; ``_NotPlain`` otherwise. (``m`` itself
    serves: the caller only maps it to events at once, reading its strings.)"""
    if type(m) is not ContextMessage:
        raise _NotPlain
    role = m.role
    if (
        type(role) is not str
        or role not in _ROLES
        or type(m.content) is not str
        or (m.name is not None and type(m.name) is not str)
        or (m.tool_call_id is not None and type(m.tool_call_id) is not str)
        or (m.reasoning is not None and type(m.reasoning) is not str)
        or type(m.is_error) is not bool
        or type(m.compacted) is not bool
        or type(m.synthetic) is not bool
        or (role == "tool" and not m.tool_call_id)  # a rule of ``parse_message``
    ):
        raise _NotPlain
    images, calls, metadata = m.images, m.tool_calls, m.metadata
    if images is None and calls is None and metadata is None:
        return m
    budget = [_MAX_ITEMS]
    if images is not None:
        if type(images) is not list or any(type(url) is not str for url in images):
            raise _NotPlain
        images = list(images)
    if calls is not None:
        calls = [_plain_call(call, budget) for call in _plain_list(calls)]
        # The rules ``parse_message`` applies: a refusal takes the round trip, which
        # raises it with its field path.
        if role != "assistant" or not all(call.id and call.name for call in calls):
            raise _NotPlain
    if metadata is not None:
        metadata = _copy_dict(metadata, budget, 0)
    return msgspec.structs.replace(m, images=images, tool_calls=calls, metadata=metadata)


def _plain_list(value: Any) -> list[Any]:
    if type(value) is not list:
        raise _NotPlain
    return value


def _plain_call(call: Any, budget: list[int]) -> ToolCall:
    if type(call) is not ToolCall or type(call.id) is not str or type(call.name) is not str:
        raise _NotPlain
    arguments = call.arguments
    if type(arguments) is dict:
        arguments = _copy_dict(arguments, budget, 0)
    elif type(arguments) is list:
        arguments = _copy_list(arguments, budget, 0)
    elif type(arguments) not in _SCALARS:
        raise _NotPlain
    return ToolCall(call.id, call.name, arguments)


def _copy(value: Any, budget: list[int], depth: int) -> Any:
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is dict:
        return _copy_dict(value, budget, depth + 1)
    if kind is list:
        return _copy_list(value, budget, depth + 1)
    raise _NotPlain


def _spend(budget: list[int], items: int, depth: int) -> None:
    budget[0] -= items + 1
    if budget[0] < 0 or depth > _MAX_DEPTH:
        raise _NotPlain


def _copy_dict(value: Any, budget: list[int], depth: int) -> dict[str, Any]:
    if type(value) is not dict:
        raise _NotPlain
    _spend(budget, len(value), depth)
    out = {}
    for key, item in value.items():
        if type(key) is not str:
            raise _NotPlain
        out[key] = item if type(item) in _SCALARS else _copy(item, budget, depth)
    return out


def _copy_list(value: list[Any], budget: list[int], depth: int) -> list[Any]:
    _spend(budget, len(value), depth)
    return [item if type(item) in _SCALARS else _copy(item, budget, depth) for item in value]
