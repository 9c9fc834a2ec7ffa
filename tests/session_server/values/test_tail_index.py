"""``TailIndex.window`` is ``tail_window`` on the run it indexes, whatever the history of
the run (built at once, extended batch by batch, trimmed at its start), on logs with
reused ids, results before their calls, orphans, results without an id, compactions
and (when drawn) no stored turns; and the ids it keeps stay bounded by the run."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from session_server.values.events import SessionEvent, ToolCall
from session_server.values.tail_index import TailIndex
from session_server.values.turns import _pairs, _safe_start, tail_window

from .test_repair_scan import agent_logs
from .test_window_equivalence import raw_logs, stored


def _check(index: TailIndex, run: list[SessionEvent]) -> None:
    assert index.end - index.base == len(run)
    for limit in range(1, len(run) + 3):
        for complete in (True, False):
            got = index.window(run, limit, complete=complete)
            assert got == tail_window(run, limit, complete=complete), (limit, complete)


@settings(max_examples=300, deadline=None)
@given(st.one_of(raw_logs(40), agent_logs(12)), st.booleans(), st.data())
def test_the_index_gives_the_tail_window_through_appends_and_trims(
    events: list[SessionEvent], with_turns: bool, data: st.DataObject
) -> None:
    log = stored(events) if with_turns else [replace(e, turn=None) for e in events]
    seeded = data.draw(st.integers(0, len(log)), label="seeded")
    run = log[:seeded]
    index = TailIndex(run)
    _check(index, run)
    position = seeded
    while position < len(log):
        step = data.draw(st.integers(1, 6), label="step")
        batch = log[position : position + step]
        position += len(batch)
        run.extend(batch)
        index.extend(batch)
        excess = data.draw(st.integers(0, len(run)), label="trim")
        if excess:
            del run[:excess]
            index.trim(excess)
        _check(index, run)


def test_ids_of_dropped_calls_are_forgotten() -> None:
    """A run trimmed to a few events keeps only the ids its calls could still name."""
    log: list[SessionEvent] = []
    for n in range(300):
        log += [
            SessionEvent(action="user_message", content="q"),
            SessionEvent(action="tool_call_request", tool_calls=[ToolCall(f"c{n}", "f")]),
            SessionEvent(action="tool_result", tool_call_id=f"c{n}", tool_name="f"),
        ]
    log = stored([replace(e, id=f"e{i}", seq=i + 1) for i, e in enumerate(log)])
    index, run = TailIndex(), []
    for k in range(0, len(log), 3):
        run.extend(log[k : k + 3])
        index.extend(log[k : k + 3])
        if len(run) > 12:
            excess = len(run) - 12
            del run[:excess]
            index.trim(excess)
        assert len(index.latest) <= 2 * len(run) + 64 + 1
    assert len(index.users) == 4 and len(index.results) == len(index.prev) == 4
    _check(index, run)
    # A result naming a call that left the run is an orphan there, as tail_window says.
    late = replace(log[2], id="late", seq=len(log) + 1, tool_call_id="c0")
    run.append(late)
    index.extend([late])
    _check(index, run)


@settings(max_examples=300, deadline=None)
@given(st.one_of(raw_logs(40), agent_logs(12)), st.data())
def test_the_indexed_safe_start_is_the_one_of_the_spans(
    events: list[SessionEvent], data: st.DataObject
) -> None:
    """Every start, on every loaded tail of a trimmed run (``TailIndex.window`` asks for
    fewer: the cut of a tail window only)."""
    log = stored(events)
    excess = data.draw(st.integers(0, len(log)), label="trim")
    index = TailIndex(log)
    index.trim(excess)
    run = log[excess:]
    for lower in range(len(run)):
        loaded = run[lower:]
        pairs = _pairs(loaded)
        for start in range(1, len(loaded) + 1):
            got = index._safe_start(run, lower, start, pairs)
            assert got == _safe_start(loaded, start, pairs), (lower, start)


def test_equally_near_boundaries_go_to_the_earlier_one() -> None:
    def ev(action: str, **fields: object) -> SessionEvent:
        return SessionEvent(action=action, **fields)  # type: ignore[arg-type]

    # A pair across the start (3) only: the user messages at 1 and 5 split nothing and
    # nothing nearer is a boundary; at equal distance the earlier one wins.
    loaded = stored(
        [
            ev("agent_message"),
            ev("user_message"),
            ev("tool_call_request", tool_calls=[ToolCall("a", "f")]),
            ev("tool_result", tool_call_id="a"),
            ev("agent_message"),
            ev("user_message"),
            ev("agent_message"),
        ]
    )
    index = TailIndex(loaded)
    for start in range(1, len(loaded) + 1):
        pairs = _pairs(loaded)
        assert index._safe_start(loaded, 0, start, pairs) == _safe_start(loaded, start, pairs)
    assert index._safe_start(loaded, 0, 3, _pairs(loaded)) == 1
