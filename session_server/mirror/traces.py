"""Session events -> reference raw-trace lines (pure).

One raw-trace line per user message, assistant message, tool call and tool result, with
the reference keys in the reference order (``id, ts, turn_id, seq, trace_type, content,
source_event, media, tool_name, tool_call_id, tool_args, tool_result, tool_error, ...,
tags``). ``system_instruction`` and ``compaction`` events produce no line.

Mapping decisions:

- ``user_message`` -> ``user`` (``media.images`` from the event's images, tags
  ``["processed"]``); ``agent_message`` -> ``assistant`` (tags ``["final"]``).
- ``tool_call_request`` -> one ``tool_call`` line per call (content ``""``), then, when
  the step has text, one ``assistant`` line carrying it. This is the reference order:
  the reference writes the tool intents first and the complete response after them.
- ``tool_result`` -> ``tool_result`` with ``tool_result`` = the content parsed as JSON when
  it is JSON, else the string; a failed result (``is_success`` false) carries the content
  as ``tool_error`` instead. ``tool_args`` of the matching call are repeated, as the
  reference does. A result keeps the turn of its call.
- ``turn_id`` is ``turn_%04d`` of the event's turn (filled by the store; computed like
  ``turns.assign_turns`` when absent); ``seq`` counts lines within a turn from 1;
  ``ts`` is ``timestamp / 1000``.

Trace overrides: an event may carry, in its ``metadata``, the exact line fields to
reproduce (set by the importer): ``metadata["trace"]`` for a one-line event,
``metadata["call_traces"][i]`` for call ``i`` of a tool_call_request and
``metadata["assistant_trace"]`` for its assistant line (whose presence forces that line
even when the content is empty). An override is a dict of line keys to values, plus an
optional ``"_omit"`` list of keys the line must not have.

``TraceState`` is the small per-session state needed to number lines incrementally
(turn -> next seq, call id -> turn, pending calls); ``TraceState.from_events`` rebuilds it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from ..values.events import SessionEvent, ToolArguments
from ..values.json_depth import json_text_too_deep

__all__ = [
    "ASSISTANT_TRACE_META",
    "CALL_TRACES_META",
    "SOURCE_EVENTS",
    "TRACE_KEY_ORDER",
    "TRACE_META",
    "TRACE_TYPES",
    "TraceState",
    "apply_override",
    "diff_override",
    "event_to_traces",
    "events_to_traces",
    "format_turn_id",
    "ms_from_ts",
    "parse_tool_result",
    "parse_turn_id",
    "ts_from_ms",
]

TRACE_TYPES: Final[tuple[str, ...]] = ("user", "assistant", "tool_call", "tool_result")
SOURCE_EVENTS: Final[dict[str, str]] = {
    "user": "LLMUserMessageReadyEvent",
    "assistant": "LLMCompleteResponseReceivedEvent",
    "tool_call": "PendingToolInvocationEvent",
    "tool_result": "ToolResultEvent",
}
TRACE_KEY_ORDER: Final[tuple[str, ...]] = (
    "id",
    "ts",
    "turn_id",
    "seq",
    "trace_type",
    "content",
    "source_event",
    "media",
    "tool_name",
    "tool_call_id",
    "tool_args",
    "tool_result",
    "tool_error",
    "correlation_id",
    "tags",
    "tool_result_ref",
)
TRACE_META: Final = "trace"
CALL_TRACES_META: Final = "call_traces"
ASSISTANT_TRACE_META: Final = "assistant_trace"
_OMIT: Final = "_omit"

_DECODER: Final = msgspec.json.Decoder()
_ENCODER: Final = msgspec.json.Encoder()


def format_turn_id(turn: int) -> str:
    return f"turn_{turn:04d}"


def parse_turn_id(turn_id: object) -> int | None:
    """The number of a ``turn_0001``-style id, or ``None``."""
    if isinstance(turn_id, str) and turn_id.startswith("turn_") and turn_id[5:].isdigit():
        return int(turn_id[5:])
    return None


def ts_from_ms(ms: int) -> float:
    return ms / 1000


def ms_from_ts(ts: object) -> int | None:
    """Milliseconds of an epoch-seconds ``ts`` (int or float); ``None`` when not a number."""
    if isinstance(ts, bool) or not isinstance(ts, int | float):
        return None
    if ts != ts or ts in (float("inf"), float("-inf")):
        return None
    return round(ts * 1000)


def parse_tool_result(content: str) -> Any:
    """``content`` parsed as JSON when it is JSON, else the string itself."""
    if not content:
        return content
    first = content.lstrip()[:1]
    if first and (first in '{["-' or first.isdigit() or first in "tfn"):
        if json_text_too_deep(content):  # a line of it could not be read back
            return content
        try:
            return _DECODER.decode(content)
        except msgspec.DecodeError:
            return content
    return content


class TraceState:
    """Per-session numbering state: current turn, next seq per turn, calls seen.

    ``pending`` keeps the turn, name and arguments of calls still waiting for a result
    (removed by the first result); ``call_turns`` keeps the turn of every call seen.
    """

    __slots__ = ("call_turns", "next_seq", "pending", "turn")

    def __init__(self) -> None:
        self.turn = 0
        self.next_seq: dict[int, int] = {}
        self.call_turns: dict[str, int] = {}
        self.pending: dict[str, tuple[int, str, ToolArguments]] = {}

    @classmethod
    def from_events(cls, events: Iterable[SessionEvent]) -> TraceState:
        state = cls()
        for event in events:
            event_to_traces(event, state)
        return state

    def take_seq(self, turn: int) -> int:
        seq = self.next_seq.get(turn, 1)
        self.next_seq[turn] = seq + 1
        return seq

    def turn_of(self, event: SessionEvent) -> int:
        """The event's turn (the store's when set) and advance the current turn."""
        action = event.action
        if event.turn is not None:
            turn = event.turn
        elif action == "user_message":
            turn = self.turn + 1
        elif action == "tool_result" and event.tool_call_id in self.call_turns:
            turn = self.call_turns[event.tool_call_id or ""]
        else:
            turn = self.turn
        if action != "tool_result":
            self.turn = turn
        return turn


def _as_dict(value: object) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def _reorder(line: dict[str, Any]) -> dict[str, Any]:
    out = {k: line[k] for k in TRACE_KEY_ORDER if k in line}
    for k, v in line.items():
        if k not in out:
            out[k] = v
    return out


def apply_override(line: dict[str, Any], override: Mapping[str, Any] | None) -> dict[str, Any]:
    """``line`` with the override's keys set and its ``_omit`` keys removed, in key order."""
    if not override:
        return line
    for key, value in override.items():
        if key != _OMIT:
            line[key] = value
    omit = override.get(_OMIT)
    if isinstance(omit, list):
        for key in omit:
            if isinstance(key, str):
                line.pop(key, None)
    return _reorder(line)


def diff_override(derived: Mapping[str, Any], original: Mapping[str, Any]) -> dict[str, Any]:
    """The smallest override that turns ``derived`` into ``original`` (JSON-exact values)."""
    override: dict[str, Any] = {}
    for key, value in original.items():
        if key not in derived or _ENCODER.encode(derived[key]) != _ENCODER.encode(value):
            override[key] = value
    omit = [k for k in derived if k not in original]
    if omit:
        override[_OMIT] = omit
    return override


def _base(
    trace_id: str, ts: float, turn: int, seq: int, trace_type: str, content: str
) -> dict[str, Any]:
    return {
        "id": trace_id,
        "ts": ts,
        "turn_id": format_turn_id(turn),
        "seq": seq,
        "trace_type": trace_type,
        "content": content,
        "source_event": SOURCE_EVENTS[trace_type],
    }


def event_to_traces(event: SessionEvent, state: TraceState) -> list[dict[str, Any]]:
    """The raw-trace lines of one event (possibly none), advancing ``state``."""
    action = event.action
    turn = state.turn_of(event)
    if action in ("system_instruction", "compaction"):
        return []
    meta = event.metadata or {}
    ts = ts_from_ms(event.timestamp)
    if action == "user_message":
        line = _base(event.id, ts, turn, state.take_seq(turn), "user", event.content)
        line["media"] = {"images": list(event.images or ()), "audio": [], "video": []}
        line["tags"] = ["processed"]
        return [apply_override(line, _as_dict(meta.get(TRACE_META)))]
    if action == "agent_message":
        line = _base(event.id, ts, turn, state.take_seq(turn), "assistant", event.content)
        line["tags"] = ["final"]
        return [apply_override(line, _as_dict(meta.get(TRACE_META)))]
    if action == "tool_call_request":
        return _tool_call_lines(event, state, turn, ts, meta)
    # tool_result
    call_id = event.tool_call_id
    call = state.pending.pop(call_id, None) if call_id is not None else None
    line = _base(event.id, ts, turn, state.take_seq(turn), "tool_result", "")
    tool_name = event.tool_name
    if tool_name is None and call is not None:
        tool_name = call[1]
    line["tool_name"] = tool_name
    line["tool_call_id"] = call_id
    if call is not None:
        line["tool_args"] = call[2]
    if event.is_success is False:
        line["tool_error"] = event.content
    else:
        line["tool_result"] = parse_tool_result(event.content)
    return [apply_override(line, _as_dict(meta.get(TRACE_META)))]


def _tool_call_lines(
    event: SessionEvent, state: TraceState, turn: int, ts: float, meta: Mapping[str, Any]
) -> list[dict[str, Any]]:
    raw_overrides = meta.get(CALL_TRACES_META)
    overrides = raw_overrides if isinstance(raw_overrides, list) else []
    lines: list[dict[str, Any]] = []
    for i, call in enumerate(event.tool_calls or ()):
        trace_id = event.id if i == 0 else f"{event.id}:{i}"
        line = _base(trace_id, ts, turn, state.take_seq(turn), "tool_call", "")
        line["tool_name"] = call.name
        line["tool_call_id"] = call.id
        line["tool_args"] = call.arguments
        override = _as_dict(overrides[i]) if i < len(overrides) else None
        lines.append(apply_override(line, override))
        state.call_turns[call.id] = turn
        state.pending[call.id] = (turn, call.name, call.arguments)
    assistant_override = _as_dict(meta.get(ASSISTANT_TRACE_META))
    if event.content or assistant_override is not None:
        trace_id = f"{event.id}:text" if lines else event.id
        line = _base(trace_id, ts, turn, state.take_seq(turn), "assistant", event.content)
        line["tags"] = ["final"]
        lines.append(apply_override(line, assistant_override))
    return lines


def events_to_traces(events: Iterable[SessionEvent]) -> list[dict[str, Any]]:
    """Every raw-trace line of ``events`` (oldest first), numbered from a fresh state."""
    state = TraceState()
    out: list[dict[str, Any]] = []
    for event in events:
        out.extend(event_to_traces(event, state))
    return out
