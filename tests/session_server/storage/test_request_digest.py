"""The request digest kept beside an idempotency key is the same bytes whichever way it
is computed (``request_digest`` from events, ``columns_digest`` from the metadata columns
``append`` already has) and the same as the formula written into existing files: a retry
after an upgrade still replays instead of conflicting."""

from __future__ import annotations

import hashlib

from hypothesis import given, settings
from hypothesis import strategies as st

from session_server.storage.idempotency import columns_digest, request_digest
from session_server.values.codec import dehydrate_event, encode_json, event_metadata
from session_server.values.events import SessionEvent

from ..values.test_codec import stored_events


def _as_first_written(events: list[SessionEvent], expected: int | None) -> str:
    """The digest as the store first wrote it: dehydrated rows, JSON text, its UTF-8."""
    rows = [dehydrate_event(e) for e in events]
    body = [expected, [[r["action"], r["content"], r["metadata"]] for r in rows]]
    return hashlib.sha256(encode_json(body).encode("utf-8")).hexdigest()


@settings(max_examples=300, deadline=None)
@given(st.lists(stored_events(), max_size=5), st.none() | st.integers(0, 2**62))
def test_every_way_of_computing_the_digest_gives_the_first_one(
    events: list[SessionEvent], expected: int | None
) -> None:
    first = _as_first_written(events, expected)
    assert request_digest(events, expected) == first
    metadata = [event_metadata(e) for e in events]
    assert columns_digest(events, metadata, expected) == first
    for e in events:
        assert event_metadata(e) == dehydrate_event(e)["metadata"]


def test_a_known_digest() -> None:
    events = [
        SessionEvent(action="user_message", content="héllo ⟦x⟧"),
        SessionEvent(action="tool_result", tool_call_id="c1", tool_name="f", content="r"),
    ]
    assert request_digest(events, 7) == _as_first_written(events, 7)
    assert request_digest(events, 7) == (
        hashlib.sha256(
            '[7,[["user_message","héllo ⟦x⟧",null],'
            '["tool_result","r","{\\"toolCallId\\":\\"c1\\",\\"toolName\\":\\"f\\"}"]]]'.encode()
        ).hexdigest()
    )
