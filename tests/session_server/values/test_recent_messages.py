"""The recent cache's per-event messages: a view's ``messages`` are ``event_to_message``
of its events, with the totals the builder would count (``ViewMessages``, its ``clean``
flag the full ``needs_repair``), whatever the history of the cache (seeds, appends, trims
at the cap, windows asked before); each event is converted once, and what is kept beside
the events is bounded with them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from session_server.values.codec import event_to_message
from session_server.values.events import SessionEvent, ToolCall
from session_server.values.plans import ContextWindow, SessionState
from session_server.values.recent import RecentCache, ViewMessages
from session_server.values.repair import needs_repair

from .test_repair_scan import agent_logs
from .test_window_equivalence import raw_logs, stored

SID = "s"


def expected_messages(events: list[SessionEvent]) -> ViewMessages:
    """``ViewMessages`` from its definition (the oracle)."""
    messages = [event_to_message(e) for e in events]
    others = [e for e in events if e.action != "compaction"]
    counts = [e.token_count for e in others]
    plain = len(others) == len(events) and all(m is not None for m in messages)
    return ViewMessages(
        messages=messages,
        plain=plain,
        first_seq=min((e.seq for e in events), default=0),
        tokens=None if any(c is None for c in counts) else sum(c or 0 for c in counts),
        clean=plain and not needs_repair([m for m in messages if m is not None]),
    )


def _seeded(suffix: list[SessionEvent], complete: bool, cap: int) -> RecentCache:
    cache = RecentCache(cap=cap)
    last = suffix[-1].seq if suffix else 0
    window = ContextWindow(list(suffix), SessionState(SID, last_seq=last), list(suffix), complete)
    cache.seed(SID, window, version=cache.version(SID))
    return cache


def _plain(log: list[SessionEvent], data: st.DataObject | None = None) -> list[SessionEvent]:
    """Compaction events without a record (the record rules have their own tests);
    token counts drawn, some missing."""
    counts = st.one_of(st.none(), st.integers(1, 9))
    return [
        replace(
            e,
            compaction=None,
            token_count=3 if data is None else data.draw(counts, label="tokens"),
        )
        for e in log
    ]


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(raw_logs(40), agent_logs(16)),
    st.data(),
    st.integers(4, 30),
    st.lists(st.integers(1, 30), min_size=1, max_size=4),
)
def test_view_messages_are_the_events_messages(
    events: list[SessionEvent], data: st.DataObject, cap: int, limits: list[int]
) -> None:
    log = _plain(stored(events), data)
    first = data.draw(st.integers(0, len(log)))
    seeded = data.draw(st.integers(first, len(log)))
    cache = _seeded(log[first:seeded], first == 0, cap)
    position = seeded
    while True:
        entry = cache._entries.get(SID)
        if entry is not None:
            assert len(entry.messages) == len(entry.events) <= cap
            assert len(entry.tokens) == len(entry.compactions) == len(entry.events) + 1
            lo, hi = entry.converted
            assert None not in entry.messages[lo:hi]
            if entry.repair is not None:
                # The kept repair scan covers a run of the cache, its ids those of that
                # run's calls (bounded by the cap with it).
                lo, hi, scan = entry.repair
                assert 0 <= lo <= hi <= len(entry.messages)
                assert scan.seen == {c.id for e in entry.events[lo:hi] for c in e.tool_calls or ()}
        for limit in limits:
            view = cache.window(SID, limit)
            if view is None:
                continue
            assert view.messages == expected_messages(view.events)
            # The same window as a cache that never showed a window before.
            assert entry is not None
            fresh = _seeded(entry.events, entry.complete, cap).window(SID, limit)
            assert fresh is not None
            assert fresh.events == view.events
            assert fresh.messages == view.messages
        if position == len(log):
            break
        step = data.draw(st.integers(1, 6))
        batch = log[position : position + step]
        position += len(batch)
        cache.appended(SID, batch, batch[-1].seq, compaction_required=False)


def test_each_event_is_converted_once_and_shared_between_views() -> None:
    log = _plain(stored([SessionEvent(action="user_message", content=f"q{i}") for i in range(8)]))
    cache = _seeded(log[:6], True, 100)
    first = cache.window(SID, 4)
    assert first is not None and first.messages is not None
    cache.appended(SID, log[6:], log[-1].seq, compaction_required=False)
    second = cache.window(SID, 4)
    assert second is not None and second.messages is not None
    # Events 5 and 6 were shown by the first window: the very same message objects.
    assert second.messages.messages[0] is first.messages.messages[2]
    assert second.messages.messages[1] is first.messages.messages[3]
    shown = [m.content for m in second.messages.messages if m is not None]
    assert shown == ["q4", "q5", "q6", "q7"]
    assert second.messages.tokens == 4 * 3 and second.messages.plain


def test_orphan_results_left_out_keep_the_rest_aligned() -> None:
    """A window whose orphan results are dropped is not a run of the cache: each kept
    event still gets its own message."""
    log = stored(
        [
            SessionEvent(action="user_message", content="q"),
            SessionEvent(action="tool_result", tool_call_id="gone", content="r1"),
            SessionEvent(action="agent_message", content="a"),
            SessionEvent(action="tool_result", tool_call_id="gone2", content="r2"),
            SessionEvent(action="agent_message", content="b"),
        ]
    )
    cache = _seeded(log, True, 100)
    view = cache.window(SID, 10)
    assert view is not None and view.messages is not None
    assert [e.content for e in view.events] == ["q", "a", "b"]
    assert [m.content for m in view.messages.messages if m is not None] == ["q", "a", "b"]
    assert view.messages == expected_messages(view.events)


def _turn(n: int) -> list[SessionEvent]:
    return [
        SessionEvent(action="user_message", content=f"q{n}"),
        SessionEvent(action="tool_call_request", tool_calls=[ToolCall(f"c{n}", "f")]),
        SessionEvent(action="tool_result", tool_call_id=f"c{n}", tool_name="f", content="r"),
        SessionEvent(action="agent_message", content=f"a{n}"),
    ]


def test_a_turn_after_a_clean_window_scans_only_its_own_messages() -> None:
    log = stored(
        [
            replace(e, id=f"e{seq}", session_id=SID, seq=seq, token_count=1)
            for seq, e in enumerate((e for n in range(12) for e in _turn(n)), start=1)
        ]
    )
    cache = _seeded(log[:40], True, 100)
    view = cache.window(SID, 10)
    assert view is not None and view.messages is not None and view.messages.clean
    entry = cache._entries[SID]
    assert entry.repair is not None
    lo, hi, scan = entry.repair
    assert (lo, hi) == (28, 40)  # the widened window: the turn of its first event
    for end in (44, 48):
        cache.appended(SID, log[end - 4 : end], end, compaction_required=False)
        view = cache.window(SID, 10)
        assert view is not None and view.messages is not None and view.messages.clean
        # The same scan, carried on over the new turn; the run still starts where it did.
        assert entry.repair is not None and entry.repair[:2] == (lo, end)
        assert entry.repair[2] is scan
    # A dirty turn (a call never answered) ends the run; the next clean window starts one.
    broken = [
        replace(e, id=f"x{i}", session_id=SID, seq=49 + i, token_count=1)
        for i, e in enumerate([*_turn(99)[:2], SessionEvent(action="user_message", content="q")])
    ]
    cache.appended(SID, stored(log[:48] + broken)[48:], 51, compaction_required=False)
    view = cache.window(SID, 10)
    assert view is not None and view.messages is not None and not view.messages.clean
    assert entry.repair is None
