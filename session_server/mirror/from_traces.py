"""Reference raw-trace lines -> session events (pure), exact enough to export them back.

Mapping: ``user`` -> ``user_message`` (``media.images`` -> images); ``assistant`` ->
``agent_message``; consecutive ``tool_call`` lines of one turn -> one
``tool_call_request`` with one ``ToolCall`` per line (``tool_args`` -> arguments); an
``assistant`` line right after them in the same turn is the text of that same model step
and becomes the request's ``content``, so the context has one assistant message with
text and calls, which providers accept (lines of the archive and of the active file are
never joined); ``tool_result`` -> ``tool_result`` (``is_success``
false when ``tool_error`` is set; content = the error, else the result as text).

Event ids are fresh UUIDs; trace ids, source events, tags, media and any other line field
a fresh rendering would not reproduce are kept as trace overrides in the event metadata
(see ``traces``), so exporting the events gives the same lines, byte for byte. Lines with
a missing or unknown ``trace_type`` are skipped with a warning naming their origin; a
``ts`` that is not a time the store keeps (``MAX_TIMESTAMP_MS``) refuses the import.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..values.codec import encode_json, new_event_id
from ..values.errors import InvalidParamsError
from ..values.events import SessionEvent, ToolArguments, ToolCall
from ..values.validation import MAX_TIMESTAMP_MS
from .traces import (
    ASSISTANT_TRACE_META,
    CALL_TRACES_META,
    TRACE_META,
    TRACE_TYPES,
    TraceState,
    diff_override,
    event_to_traces,
    ms_from_ts,
)

__all__ = ["ImportedTraces", "TraceEntry", "traces_to_events"]

logger = logging.getLogger("session_server.mirror")


@dataclass(frozen=True, slots=True)
class TraceEntry:
    """One raw-trace line with its origin (``"file:line"``) and whether it was archived."""

    origin: str
    line: dict[str, Any]
    archived: bool = False


@dataclass(slots=True)
class ImportedTraces:
    """Events made from trace lines; ``archived_until`` events hold every archived line."""

    events: list[SessionEvent] = field(default_factory=list)
    archived_turn_ids: list[str] = field(default_factory=list)
    archived_until: int = 0


def _text(value: object) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else encode_json(value)


def _opt_text(value: object) -> str | None:
    return None if value is None else _text(value)


def _images(line: dict[str, Any]) -> list[str] | None:
    media = line.get("media")
    images = media.get("images") if isinstance(media, dict) else None
    if isinstance(images, list) and images:
        return [_text(u) for u in images]
    return None


def _arguments(raw: Any) -> ToolArguments:
    # Arguments are kept as they were written (an object, or what the model sent).
    return {} if raw is None else raw


def traces_to_events(entries: Iterable[TraceEntry], *, session_id: str = "") -> ImportedTraces:
    """Events (oldest first, ``seq`` 0, ``turn`` unset) for ``entries`` in file order."""
    out = ImportedTraces()
    sources: list[list[dict[str, Any]]] = []
    open_request: SessionEvent | None = None  # a tool_call_request still taking lines
    open_turn: object = None
    open_archived = False
    last_ms = 0
    for entry in entries:
        line = entry.line
        trace_type = line.get("trace_type")
        if trace_type not in TRACE_TYPES:
            logger.warning("%s: line skipped: unknown trace_type %r", entry.origin, trace_type)
            continue
        ms = ms_from_ts(line.get("ts"))
        if ms is not None and not 0 <= ms <= MAX_TIMESTAMP_MS:
            where = entry.origin.rsplit("/", 1)[-1]
            raise InvalidParamsError(
                f"{where}: ts {line.get('ts')!r} is not a time this server stores (epoch "
                f"seconds between 0 and {MAX_TIMESTAMP_MS // 1000}, the end of year 9999)",
                data={"field": f"{where}.ts"},
            )
        if ms is None:
            logger.warning("%s: 'ts' is not a number; previous time used", entry.origin)
            ms = last_ms
        last_ms = ms
        turn_id = line.get("turn_id")
        text = _text(line.get("content"))
        joins = (
            open_request is not None and open_turn == turn_id and open_archived == entry.archived
        )
        if joins and open_request is not None and trace_type == "tool_call":
            open_request.tool_calls = [*(open_request.tool_calls or ()), _call(line)]
            sources[-1].append(line)
        elif joins and open_request is not None and trace_type == "assistant":
            open_request.content = text
            open_request.metadata = {ASSISTANT_TRACE_META: {}}
            sources[-1].append(line)
            open_request = None
        else:
            event = _new_event(line, trace_type, text, ms, session_id)
            open_request = event if trace_type == "tool_call" else None
            open_turn, open_archived = turn_id, entry.archived
            out.events.append(event)
            sources.append([line])
        if entry.archived:
            out.archived_until = len(out.events)
            if isinstance(turn_id, str) and turn_id not in out.archived_turn_ids:
                out.archived_turn_ids.append(turn_id)
    _attach_overrides(out.events, sources)
    return out


def _new_event(
    line: dict[str, Any], trace_type: str, text: str, ms: int, session_id: str
) -> SessionEvent:
    common: dict[str, Any] = {"id": new_event_id(), "session_id": session_id, "timestamp": ms}
    if trace_type == "tool_call":
        return SessionEvent(action="tool_call_request", tool_calls=[_call(line)], **common)
    if trace_type == "user":
        return SessionEvent(action="user_message", content=text, images=_images(line), **common)
    if trace_type == "assistant":
        return SessionEvent(action="agent_message", content=text, **common)
    error = line.get("tool_error")
    failed = error is not None
    return SessionEvent(
        action="tool_result",
        content=_text(error) if failed else _result_text(line),
        tool_call_id=_opt_text(line.get("tool_call_id")),
        tool_name=_opt_text(line.get("tool_name")),
        is_success=not failed,
        **common,
    )


def _call(line: dict[str, Any]) -> ToolCall:
    return ToolCall(
        id=_text(line.get("tool_call_id")),
        name=_text(line.get("tool_name")),
        arguments=_arguments(line.get("tool_args")),
    )


def _result_text(line: dict[str, Any]) -> str:
    result = line.get("tool_result")
    if result is None:
        return _text(line.get("content"))
    return _text(result)


def _attach_overrides(events: list[SessionEvent], sources: list[list[dict[str, Any]]]) -> None:
    """Store, per event, what a fresh rendering must change to give the original lines."""
    state = TraceState()
    for event, originals in zip(events, sources, strict=True):
        derived = event_to_traces(event, state)
        if len(derived) != len(originals):  # cannot happen: one derived line per source line
            raise AssertionError(f"import: {len(derived)} lines rendered for {len(originals)}")
        diffs = [diff_override(d, o) for d, o in zip(derived, originals, strict=True)]
        meta: dict[str, Any] = {}
        if event.action == "tool_call_request":
            n = len(event.tool_calls or ())
            meta[CALL_TRACES_META] = diffs[:n]
            if len(diffs) > n:
                meta[ASSISTANT_TRACE_META] = diffs[n]
        else:
            meta[TRACE_META] = diffs[0]
        event.metadata = meta
