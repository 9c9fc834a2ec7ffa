"""Validation of caller-supplied messages and events (pure).

Every refusal is an ``InvalidParamsError`` whose message names the offending field with
its path (``messages[2].tool_call_id``) and says what was wrong. Callers validate a whole
batch before writing anything, so a refused batch writes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final, NoReturn, TypeVar

import msgspec

from .agent_ids import unicode_id_problem
from .codec import OWN_METADATA_KEYS
from .errors import InvalidParamsError
from .events import ACTIONS, ROLES, ContextMessage, SessionEvent
from .json_depth import MAX_JSON_DEPTH, json_text_too_deep

__all__ = [
    "MAX_TIMESTAMP_MS",
    "RESERVED_METADATA_KEYS",
    "parse_client_event",
    "parse_client_events",
    "parse_client_messages",
    "parse_event",
    "parse_events",
    "parse_message",
    "parse_messages",
]

T = TypeVar("T")

MAX_TIMESTAMP_MS: Final = 253_402_300_799_999
"""The latest time a timestamp (ms since the epoch) may name: the end of year 9999, the
last instant calendars and ``datetime`` represent. Timestamps are 0 (the server assigns
the time) up to this."""
_PATH = re.compile(r" - at `\$(.*)`$")


_FIELD = re.compile(r"^Object (?:missing required|contains unknown) field `([^`]*)`$")
_CHOICES = {"role": ROLES, "action": ACTIONS}


def _at(where: str, index: int | None) -> str:
    """The path of an item: ``where``, or ``where[index]`` for an item of a list (made
    only when a check refuses: formatting it for every item cost more than the checks)."""
    return where if index is None else f"{where}[{index}]"


def _convert(obj: Any, kind: type[T], where: str, index: int | None = None) -> T:
    if not isinstance(obj, dict):
        where = _at(where, index)
        raise InvalidParamsError(
            f"{where}: must be an object, got {type(obj).__name__}", data={"field": where}
        )
    try:
        return msgspec.convert(obj, kind, strict=True)
    except msgspec.ValidationError as exc:
        where = _at(where, index)
        text = str(exc)
        match = _PATH.search(text)
        if match:
            path = where + match.group(1)
            text = text[: match.start()]
        else:
            path = where
        # msgspec says "Object contains unknown field `x`", "Object missing required field
        # `x`" (the path then names the object: add the field) or "Expected `str`, got `int`".
        named = _FIELD.match(text)
        if named:
            path = f"{path}.{named.group(1)}"
        leaf = path.rsplit(".", 1)[-1]
        if text.startswith("Invalid enum value") and leaf in _CHOICES:
            text += f" (expected one of: {', '.join(_CHOICES[leaf])})"
        raise InvalidParamsError(f"{path}: {text}", data={"field": path}) from exc


def _refuse(field: str, problem: str) -> NoReturn:
    raise InvalidParamsError(f"{field}: {problem}", data={"field": field})


def _require(cond: bool, field: str, problem: str) -> None:
    if not cond:
        _refuse(field, problem)


# The checks of every persisted message and event test first and name the field only
# when they refuse: a field path formatted for each check that passes cost more than
# the check.


def _check_tool_calls(calls: Sequence[Any] | None, where: str, index: int | None = None) -> None:
    for i, call in enumerate(calls or ()):
        if not call.id:
            _refuse(f"{_at(where, index)}.tool_calls[{i}].id", "must be a non-empty string")
        if not call.name:
            _refuse(f"{_at(where, index)}.tool_calls[{i}].name", "must be a non-empty string")
        if type(call.arguments) is str and json_text_too_deep(call.arguments):
            _refuse(
                f"{_at(where, index)}.tool_calls[{i}].arguments",
                f"a JSON text nested deeper than {MAX_JSON_DEPTH} levels",
            )


def parse_message(obj: Any, where: str = "message", *, index: int | None = None) -> ContextMessage:
    """Validate one message given as a JSON object; return it as a ``ContextMessage``
    (``index``: it is item ``index`` of the list at ``where``, which refusals name)."""
    msg = _convert(obj, ContextMessage, where, index)
    if msg.role == "tool" and not msg.tool_call_id:
        _refuse(f"{_at(where, index)}.tool_call_id", "required for role 'tool'")
    if msg.tool_calls is not None:
        if msg.role != "assistant":
            _refuse(f"{_at(where, index)}.tool_calls", "only assistant messages carry tool calls")
        _check_tool_calls(msg.tool_calls, where, index)
    return msg


def parse_messages(objs: Any, where: str = "messages") -> list[ContextMessage]:
    _require(isinstance(objs, list), where, "must be a list of message objects")
    return [parse_message(o, where, index=i) for i, o in enumerate(objs)]


def parse_event(obj: Any, where: str = "event", *, index: int | None = None) -> SessionEvent:
    """Validate one event given as a JSON object (server-assigned fields may be omitted;
    ``index``: it is item ``index`` of the list at ``where``, which refusals name)."""
    ev = _convert(obj, SessionEvent, where, index)
    if ev.id and (problem := unicode_id_problem(ev.id)):
        _refuse(f"{_at(where, index)}.id", problem)
    if not 0 <= ev.timestamp <= MAX_TIMESTAMP_MS:
        _refuse(
            f"{_at(where, index)}.timestamp",
            f"{ev.timestamp} is not a time in ms between 0 (the server's clock) and "
            f"{MAX_TIMESTAMP_MS} (year 9999)",
        )
    if ev.action == "tool_result" and not ev.tool_call_id:
        _refuse(f"{_at(where, index)}.tool_call_id", "required for action 'tool_result'")
    if ev.action == "tool_call_request":
        if not ev.tool_calls:
            _refuse(
                f"{_at(where, index)}.tool_calls", "required (non-empty) for 'tool_call_request'"
            )
        _check_tool_calls(ev.tool_calls, where, index)
    elif ev.tool_calls:
        _refuse(
            f"{_at(where, index)}.tool_calls", "only 'tool_call_request' events carry tool calls"
        )
    return ev


def parse_events(objs: Any, where: str = "events") -> list[SessionEvent]:
    _require(isinstance(objs, list), where, "must be a list of event objects")
    return [parse_event(o, where, index=i) for i, o in enumerate(objs)]


RESERVED_METADATA_KEYS: frozenset[str] = frozenset(
    key for keys in OWN_METADATA_KEYS.values() for key in keys
)
"""Keys the server writes inside the stored metadata JSON (``model``, ``toolCalls``,
``compactedEventCount``, ...): a client's free-form ``metadata`` may not use them."""


def _refuse_reserved(metadata: dict[str, Any] | None, where: str) -> None:
    for key in metadata or ():
        _require(
            key not in RESERVED_METADATA_KEYS,
            f"{where}.metadata.{key}",
            "is a reserved key the server writes itself; use another name",
        )


def parse_client_events(objs: Any, where: str = "events") -> list[SessionEvent]:
    """``parse_events`` for events a client sends: ``compaction`` events (and the
    compaction fields) are written by the server only (``memory.compact``), and the
    free-form ``metadata`` may not use a reserved key."""
    events = parse_events(objs, where)
    for i, ev in enumerate(events):
        if (
            ev.action == "compaction"
            or ev.compaction is not None
            or ev.compacted_event_count is not None
            or ev.metadata
        ):
            _check_client_event(ev, f"{where}[{i}]")
    return events


def parse_client_event(obj: Any, where: str) -> SessionEvent:
    """``parse_event`` for one event a client sends outside a list (``events.pop``'s
    ``replace_with``): refused exactly as ``parse_client_events`` refuses an item."""
    ev = parse_event(obj, where)
    _check_client_event(ev, where)
    return ev


def _check_client_event(ev: SessionEvent, at: str) -> None:
    _require(
        ev.action != "compaction",
        f"{at}.action",
        "'compaction' events are written by the server only (use memory.compact)",
    )
    _require(ev.compaction is None, f"{at}.compaction", "is written by the server only")
    _require(
        ev.compacted_event_count is None,
        f"{at}.compacted_event_count",
        "is written by the server only",
    )
    _refuse_reserved(ev.metadata, at)


def parse_client_messages(objs: Any, where: str = "messages") -> list[ContextMessage]:
    """``parse_messages`` for messages a client sends: no reserved ``metadata`` key."""
    messages = parse_messages(objs, where)
    for i, msg in enumerate(messages):
        if msg.metadata:
            _refuse_reserved(msg.metadata, f"{where}[{i}]")
    return messages
