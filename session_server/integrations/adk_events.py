"""Google ADK events <-> session-server events, and ADK's state scopes (pure functions).

An ADK ``Event`` is stored as the session-server events a model would see:

- a user's text: one ``user_message``;
- a model's text (thought parts as ``reasoning``): one ``agent_message``;
- a model's function calls (with any text beside them): one ``tool_call_request``;
- function responses: one ``tool_result`` per response (paired with its call by id);
- anything else (a state-only event, inline data, a transcription): an empty message of
  the author's role, so the event keeps its place in the log.

The first of these carries the whole ADK event verbatim in ``metadata["adk_event"]``
(``Event.model_dump(mode="json", exclude_none=True)``, what ADK's own database services
store), the others ``metadata["adk_part_of"]`` (the ADK event id). Reading turns the
``adk_event`` records back into equal ``Event`` objects; a compacted working context turns
into ADK events with :func:`context_to_events` (summary first, placeholders for old tool
outputs, the raw tail verbatim).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from google.adk.events.event import Event
from google.genai import types

from session_server.values.context import WorkingContext
from session_server.values.errors import InvalidParamsError
from session_server.values.events import ContextMessage, SessionEvent, ToolCall
from session_server.values.usage import MAX_MODEL_CHARS, normalise_usage

__all__ = [
    "ADK_EVENT",
    "ADK_PART_OF",
    "COMPACTION_INVOCATION",
    "adk_event_ids",
    "adk_events_of",
    "adk_usage",
    "context_to_events",
    "event_to_records",
    "merged_state",
    "split_state",
]

ADK_EVENT: Final = "adk_event"
"""Metadata key holding an ADK event verbatim (on the first record of each ADK event)."""
ADK_PART_OF: Final = "adk_part_of"
"""Metadata key of the further records of one ADK event: the ADK event id."""
COMPACTION_INVOCATION: Final = "session-server-compaction"
"""The ``invocation_id`` of the summary event a compacted ``get_session`` starts with."""
APP_PREFIX: Final = "app:"
USER_PREFIX: Final = "user:"
TEMP_PREFIX: Final = "temp:"


def _call_id(call_id: str | None, event_id: str, index: int) -> str:
    return call_id or f"{event_id}:{index}"


def event_to_records(event: Event) -> list[SessionEvent]:
    """The session-server events that store ``event`` (one or more; see the module)."""
    blob = event.model_dump(mode="json", exclude_none=True)
    parts: Sequence[types.Part] = (event.content.parts or []) if event.content else []
    texts = [p.text for p in parts if p.text and not p.thought]
    thoughts = [p.text for p in parts if p.text and p.thought]
    calls = [p.function_call for p in parts if p.function_call is not None]
    responses = [p.function_response for p in parts if p.function_response is not None]
    timestamp = round(event.timestamp * 1000)
    text = "\n".join(texts)
    reasoning = "\n".join(thoughts) or None
    records: list[SessionEvent] = []
    if responses:
        for index, response in enumerate(responses):
            body = response.response if response.response is not None else {}
            records.append(
                SessionEvent(
                    timestamp=timestamp,
                    action="tool_result",
                    content=json.dumps(body, ensure_ascii=False, default=str),
                    tool_call_id=_call_id(response.id, event.id, index),
                    tool_name=response.name or "",
                    is_success="error" not in body,
                )
            )
    elif calls:
        records.append(
            SessionEvent(
                timestamp=timestamp,
                action="tool_call_request",
                content=text,
                reasoning=reasoning,
                tool_calls=[
                    ToolCall(
                        id=_call_id(call.id, event.id, index),
                        name=call.name or "",
                        arguments=dict(call.args or {}),
                    )
                    for index, call in enumerate(calls)
                ],
            )
        )
    elif event.author == "user":
        records.append(SessionEvent(timestamp=timestamp, action="user_message", content=text))
    else:
        records.append(
            SessionEvent(
                timestamp=timestamp, action="agent_message", content=text, reasoning=reasoning
            )
        )
    head, *rest = records
    out = [_with_metadata(head, {ADK_EVENT: blob})]
    out += [_with_metadata(r, {ADK_PART_OF: event.id}) for r in rest]
    return out


def adk_usage(event: Event) -> tuple[dict[str, Any] | None, str | None]:
    """The provider usage an ADK event carries (its ``usage_metadata``, Gemini's shape,
    which ``values.usage.normalise_usage`` reads) and the model (``model_version``), for
    ``events.append``'s ``usage`` and ``model``; ``(None, None)`` when there is none, or
    when its counts are not valid usage (the event is stored all the same, verbatim)."""
    if event.usage_metadata is None:
        return None, None
    usage = event.usage_metadata.model_dump(mode="json", exclude_none=True)
    model = event.model_version
    if model is not None and not 0 < len(model) <= MAX_MODEL_CHARS:
        model = None
    try:
        if normalise_usage(usage, model) is None:
            return None, None
    except InvalidParamsError:
        return None, None
    return usage, model


def _with_metadata(record: SessionEvent, metadata: dict[str, Any]) -> SessionEvent:
    record.metadata = metadata
    return record


def _blob(metadata: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not metadata:
        return None
    blob = metadata.get(ADK_EVENT)
    return blob if isinstance(blob, dict) else None


def event_from(blob: Mapping[str, Any]) -> Event:
    """The ADK event of a stored blob, validated as JSON: bytes (inline data, thought
    signatures) are base64 in the blob, and only JSON validation decodes them."""
    return Event.model_validate_json(json.dumps(blob, ensure_ascii=False))


def adk_events_of(records: Iterable[SessionEvent]) -> list[Event]:
    """The ADK events stored in ``records`` (in order; other records are skipped)."""
    return [event_from(b) for b in (_blob(r.metadata) for r in records) if b]


def adk_event_ids(records: Iterable[SessionEvent]) -> set[str]:
    """The ids of the ADK events stored in ``records`` (read from the blobs, unvalidated)."""
    return {str(b.get("id")) for b in (_blob(r.metadata) for r in records) if b}


def _placeholder(event: Event, call_id: str, text: str) -> Event:
    """``event`` with the response of ``call_id`` replaced by ``{"result": text}``."""
    patched = event.model_copy(deep=True)
    parts = (patched.content.parts or []) if patched.content else []
    for index, part in enumerate(parts):
        response = part.function_response
        if response is not None and _call_id(response.id, event.id, index) == call_id:
            response.response = {"result": text}
    return patched


def _text_event(role: str, text: str, event_id: str, timestamp: float) -> Event:
    author = "user" if role in ("user", "system") else "model"
    return Event(
        id=event_id,
        invocation_id=COMPACTION_INVOCATION,
        author=author,
        timestamp=timestamp,
        content=types.Content(
            role="user" if author == "user" else "model", parts=[types.Part(text=text)]
        ),
    )


def context_to_events(ctx: WorkingContext, *, now: float) -> list[Event]:
    """A compacted working context as valid ADK events: the memory (summary) as one
    leading user event, then each message's ADK event verbatim, except that a compacted
    tool output becomes its placeholder and a message with no ADK event (a synthetic
    result for a call that never got one, a system note) becomes a new event."""
    out: list[Event] = []
    index: dict[str, int] = {}
    first_ts = None
    for message in ctx.messages:
        blob = _blob(message.metadata)
        if blob is not None:
            first_ts = float(blob.get("timestamp", now))
            break
    if ctx.system_instructions:
        summary = "\n\n".join(ctx.system_instructions)
        out.append(
            _text_event("user", summary, f"{COMPACTION_INVOCATION}:summary", first_ts or now)
        )
    last_ts = first_ts or now
    for position, message in enumerate(ctx.messages):
        blob = _blob(message.metadata)
        if blob is not None:
            event = event_from(blob)
            last_ts = event.timestamp
            if message.compacted and message.tool_call_id:
                event = _placeholder(event, message.tool_call_id, message.content)
            index[event.id] = len(out)
            out.append(event)
            continue
        part_of = (message.metadata or {}).get(ADK_PART_OF)
        if isinstance(part_of, str) and part_of in index:
            if message.compacted and message.tool_call_id:
                at = index[part_of]
                out[at] = _placeholder(out[at], message.tool_call_id, message.content)
            continue
        out.append(_synthetic(message, f"{COMPACTION_INVOCATION}:{position}", last_ts))
    return out


def _synthetic(message: ContextMessage, event_id: str, timestamp: float) -> Event:
    if message.role == "tool":
        part = types.Part(
            function_response=types.FunctionResponse(
                id=message.tool_call_id,
                name=message.name or "",
                response={"result": message.content},
            )
        )
        return Event(
            id=event_id,
            invocation_id=COMPACTION_INVOCATION,
            author="user",
            timestamp=timestamp,
            content=types.Content(role="user", parts=[part]),
        )
    return _text_event(message.role, message.content, event_id, timestamp)


def split_state(
    state: Mapping[str, Any] | None,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """``(app, user, session)`` deltas of a state or state delta, keys of the first two
    without their prefix; ``temp:`` keys are dropped (never stored)."""
    app: dict[str, Any] = {}
    user: dict[str, Any] = {}
    session: dict[str, Any] = {}
    for key, value in (state or {}).items():
        if key.startswith(APP_PREFIX):
            app[key.removeprefix(APP_PREFIX)] = value
        elif key.startswith(USER_PREFIX):
            user[key.removeprefix(USER_PREFIX)] = value
        elif not key.startswith(TEMP_PREFIX):
            session[key] = value
    return app, user, session


def merged_state(
    app: Mapping[str, Any], user: Mapping[str, Any], session: Mapping[str, Any]
) -> dict[str, Any]:
    """The state an ADK session shows: its own keys, then ``app:`` and ``user:`` keys."""
    state = copy.deepcopy(dict(session))
    state.update({APP_PREFIX + k: copy.deepcopy(v) for k, v in app.items()})
    state.update({USER_PREFIX + k: copy.deepcopy(v) for k, v in user.items()})
    return state
