"""``build_parts`` gives what it gave before the recent cache kept each event's message
(``builder_reference``: the previous builder, kept as the oracle), with the cache's
messages and without, on random logs (reused call ids, results before their calls,
orphans, compaction events, missing token counts) under no record, a summarize record
and compact records with and without memory."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from session_server.compaction.builder import build_compacted_context, build_parts
from session_server.values.events import SessionEvent

from ..values.test_recent_messages import expected_messages
from ..values.test_window_equivalence import raw_logs, stored
from . import builder_reference as reference


def _memory(tail_start: int) -> dict[str, Any]:
    return {
        "episodic": [],
        "semantic": [],
        "tail_start_seq": tail_start,
        "tail_start_turn": 1,
    }


@st.composite
def records(draw: st.DrawFn, last_seq: int) -> dict[str, Any] | None:
    seq = st.integers(0, last_seq + 2)
    kind = draw(st.sampled_from(["none", "summarize", "compact", "compact+memory"]))
    if kind == "none":
        return None
    if kind == "summarize":
        start = draw(seq)
        return {"strategy": "summarize", "boundary_seq": start, **_memory(start)}
    record: dict[str, Any] = {
        "strategy": "compact",
        "boundary_seq": draw(seq),
        "params": {
            "compact_clear_tool_inputs": draw(st.booleans()),
            "compact_exclude_tools": draw(st.sampled_from([[], ["f"], ["g"]])),
        },
    }
    if kind == "compact+memory":
        record["memory"] = _memory(draw(seq))
    return record


@settings(max_examples=300, deadline=None)
@given(raw_logs(), st.data())
def test_build_parts_is_the_reference(events: list[SessionEvent], data: st.DataObject) -> None:
    log = [
        replace(e, token_count=data.draw(st.one_of(st.none(), st.integers(1, 9)), label="tokens"))
        for e in stored(events)
    ]
    first = data.draw(st.integers(0, len(log)))
    shown = log[first:]
    record = data.draw(records(len(log)))
    expected = reference.build_parts(shown, record)
    assert build_parts(shown, record) == expected
    messages = expected_messages(shown)
    assert build_parts(shown, record, messages=messages) == expected
    assert messages == expected_messages(shown)  # the cache's list untouched


def test_the_context_copies_the_callers_message_list() -> None:
    log = stored([SessionEvent(action="user_message", content="q")])
    messages = expected_messages(log)
    ctx = build_compacted_context(log, record=None, messages=messages)
    ctx.messages.clear()
    assert len(messages.messages) == 1
