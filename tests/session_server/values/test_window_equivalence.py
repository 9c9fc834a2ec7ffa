"""The window rule of ``values.turns`` gives exactly what it gave before it was made faster
(``window_reference``: the previous implementation, kept as the oracle), on random logs
with reused call ids, results before their calls, duplicate and orphan results, results
without an id and compaction events, with the turns the store assigns (and, for the
functions that accept them, without stored turns)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from session_server.values import turns
from session_server.values.events import Action, SessionEvent, ToolCall
from session_server.values.turns import number_turns

from . import window_reference as reference

_ids = st.sampled_from(["a", "b", "c", "d"])


@st.composite
def raw_logs(draw: st.DrawFn, max_size: int = 30) -> list[SessionEvent]:
    """Events in log order (seqs from 1), without turns."""
    out: list[SessionEvent] = []
    for _ in range(draw(st.integers(0, max_size))):
        kind = draw(
            st.sampled_from(
                [
                    "user",
                    "user",
                    "agent",
                    "system",
                    "call",
                    "call",
                    "result",
                    "result",
                    "compaction",
                ]
            )
        )
        seq = len(out) + 1
        common: dict[str, Any] = {"id": f"e{seq}", "session_id": "s", "seq": seq}
        if kind == "user":
            out.append(SessionEvent(action="user_message", content=f"u{seq}", **common))
        elif kind == "agent":
            out.append(SessionEvent(action="agent_message", content=f"a{seq}", **common))
        elif kind == "system":
            out.append(SessionEvent(action="system_instruction", content=f"s{seq}", **common))
        elif kind == "compaction":
            out.append(SessionEvent(action="compaction", compaction={}, **common))
        elif kind == "call":
            ids = draw(st.lists(_ids, min_size=1, max_size=3, unique=True))
            calls = [ToolCall(i, "f") for i in ids]
            out.append(SessionEvent(action="tool_call_request", tool_calls=calls, **common))
        else:
            call_id = draw(st.one_of(_ids, st.just("orphan"), st.none()))
            out.append(
                SessionEvent(action="tool_result", tool_call_id=call_id, tool_name="f", **common)
            )
    return out


def stored(events: list[SessionEvent]) -> list[SessionEvent]:
    """The events with the turns the store assigns on write."""
    positions, _ = number_turns(events)
    return [replace(e, turn=p.turn) for e, p in zip(events, positions, strict=True)]


@settings(max_examples=300, deadline=None)
@given(raw_logs())
def test_tail_window_is_the_reference_on_every_suffix_and_limit(events: list[SessionEvent]) -> None:
    log = stored(events)
    for first in range(len(log) + 1):
        suffix = log[first:]
        for complete in (True, False) if first == 0 else (False,):
            for limit in range(1, len(suffix) + 2):
                got = turns.tail_window(suffix, limit, complete=complete)
                assert got == reference.tail_window(suffix, limit, complete=complete), (
                    first,
                    complete,
                    limit,
                )


@settings(max_examples=300, deadline=None)
@given(raw_logs(), st.booleans())
def test_window_from_and_its_parts_are_the_reference(
    events: list[SessionEvent], with_turns: bool
) -> None:
    """Every loaded run and nominal cut, with stored turns and without (then turns are
    counted from the events, and the orphan filter runs on the shorter list)."""
    log = stored(events) if with_turns else events
    for first in range(len(log)):
        loaded = log[first:]
        assert turns.widening_turns(loaded) == reference.widening_turns(loaded)
        assert turns.drop_orphan_results(loaded) == reference.drop_orphan_results(loaded)
        for cut in range(len(loaded) + 2):
            assert turns.window_from(loaded, cut) == reference.window_from(loaded, cut), cut
            assert turns.safe_window_start(loaded, cut) == reference.safe_window_start(loaded, cut)


@settings(max_examples=100, deadline=None)
@given(raw_logs(), st.data())
def test_some_turns_missing_is_the_reference(
    events: list[SessionEvent], data: st.DataObject
) -> None:
    """A run where only some events carry a turn (``window_from`` then counts turns)."""
    log = [e if data.draw(st.booleans()) else replace(e, turn=None) for e in stored(events)]
    for cut in range(len(log) + 1):
        assert turns.window_from(log, cut) == reference.window_from(log, cut)


def test_ties_go_to_the_earlier_boundary_and_zero_is_a_boundary() -> None:
    """The outward search keeps the rule's ties: equal distance goes to the earlier start."""

    def ev(seq: int, action: Action, **kw: Any) -> SessionEvent:
        return SessionEvent(id=f"e{seq}", seq=seq, action=action, **kw)

    call = [ToolCall("x", "f")]
    log = stored(
        [
            ev(1, "agent_message"),
            ev(2, "tool_call_request", tool_calls=call),
            ev(3, "tool_result", tool_call_id="x"),
            ev(4, "agent_message"),
            ev(5, "user_message"),
        ]
    )
    # Start 2 splits the pair (1, 2): 0 and 4 are both 2 away: the earlier one wins.
    assert turns.safe_window_start(log, 2) == reference.safe_window_start(log, 2) == 0
    assert turns.window_from(log, 2) == log
