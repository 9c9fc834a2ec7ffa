"""The byte bound of the recent caches (pure): what an event is counted for, the windows
of a cache trimmed by bytes against cold reads, and the least recently used sessions of
the least recently used caches going first when caches share a budget."""

from __future__ import annotations

import sys
import tracemalloc
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from session_server.values.cache_budget import (
    EVENT_OVERHEAD,
    CacheBudget,
    event_bytes,
    json_bytes,
)
from session_server.values.events import SessionEvent, ToolCall
from session_server.values.plans import ContextWindow, SessionState
from session_server.values.recent import RecentCache
from session_server.values.turns import tail_window

from .test_recent_messages import expected_messages
from .test_repair_scan import agent_logs
from .test_window_equivalence import raw_logs, stored

SID = "s"


def _seed(cache: RecentCache, sid: str, events: list[SessionEvent], complete: bool = True) -> None:
    last = events[-1].seq if events else 0
    window = ContextWindow(list(events), SessionState(sid, last_seq=last), list(events), complete)
    cache.seed(sid, window, version=cache.version(sid))


def _log(sizes: list[int], sid: str = SID) -> list[SessionEvent]:
    return [
        SessionEvent(
            id=f"{sid}-{seq}",
            session_id=sid,
            seq=seq,
            action="user_message",
            content="x" * size,
            turn=seq,
            token_count=1,
        )
        for seq, size in enumerate(sizes, start=1)
    ]


def _decoded_bytes(value: Any) -> int:
    """What a JSON value takes in memory once decoded (measured)."""
    raw = msgspec.json.encode(value)
    tracemalloc.start()
    try:
        decoded = msgspec.json.decode(raw)
        size = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del decoded
    return size


def test_an_event_counts_its_content_and_every_large_field() -> None:
    plain = SessionEvent(content="a" * 1000)
    assert event_bytes(plain) == EVENT_OVERHEAD + 1000
    # A str of wide characters takes up to 4 bytes each: counted so.
    wide = "\U0001f600" * 1000
    assert event_bytes(SessionEvent(content=wide)) == EVENT_OVERHEAD + 4000 >= sys.getsizeof(wide)
    big = "b" * 10_000
    for event in (
        SessionEvent(action="agent_message", reasoning=big),
        SessionEvent(images=[big]),
        SessionEvent(action="tool_call_request", tool_calls=[ToolCall("c", "f", {"q": big})]),
        SessionEvent(action="tool_call_request", tool_calls=[ToolCall("c", "f", big)]),
        SessionEvent(metadata={"k": [big]}),
        SessionEvent(action="compaction", compaction={"summary": big}),
    ):
        assert event_bytes(event) >= EVENT_OVERHEAD + 10_000, event


def test_large_json_values_are_never_under_counted() -> None:
    """The JSON length and an overhead per value stand for a JSON value: at least what
    the decoded value holds, whatever its shape."""
    for value in (
        [0] * 100_000,
        list(range(100_000)),
        {f"k{i}": i for i in range(50_000)},
        [{"a": [1, 2], "b": "x"} for _ in range(20_000)],
        [f"s{i}" for i in range(50_000)],
        ["x" * 1000] * 1000,
        [[]] * 10_000,
        [{}] * 10_000,
        [[[[[[[[[[]]]]]]]]]] * 1000,
        [1.5] * 10_000,
        ["\u00e9" * 100] * 1000,
        ["\U0001f600" * 100] * 1000,
        [True, None, False] * 10_000,
    ):
        assert json_bytes(value) >= _decoded_bytes(value)
    for small in (
        {"a": [1, "xy"], "b": {"c": None}},
        {},
        [],
        [[]],
        {"a": {}},
        [{}, {}, {}],
        [[[[[]]]]],
        {"query": "q3 north", "n": 5},
        ["\U0001f600" * 50],
    ):
        assert json_bytes(small) >= _decoded_bytes(small), small


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(raw_logs(40), agent_logs(16)),
    st.data(),
    st.integers(8, 60),
    st.lists(st.integers(1, 30), min_size=1, max_size=4),
)
def test_windows_of_a_cache_trimmed_by_bytes_are_the_cold_ones(
    events: list[SessionEvent], data: st.DataObject, kib: int, limits: list[int]
) -> None:
    """Events of drawn sizes (up to 4 KiB) in a cache whose budget holds a few of them:
    after every commit the session holds at most its share, the budget what the cache
    counts, and every window the cache gives is the store's (the whole log read cold)."""
    sizes = st.integers(0, 4096)
    log = [
        replace(e, compaction=None, token_count=1, content="c" * data.draw(sizes, label="size"))
        for e in stored(events)
    ]
    budget = CacheBudget(kib * 1024)
    cache = RecentCache(cap=1000, budget=budget)
    seeded = data.draw(st.integers(0, len(log)))
    _seed(cache, SID, log[:seeded])
    position = seeded
    while True:
        entry = cache._entries.get(SID)
        assert entry is not None  # one session: never evicted, only trimmed
        assert entry.nbytes == sum(event_bytes(e) for e in entry.events)
        assert entry.nbytes <= budget.session_bytes
        assert budget.held == cache.held_bytes == entry.nbytes <= budget.max_bytes
        for limit in limits:
            view = cache.window(SID, limit)
            if view is None:
                continue  # the actor reads the store
            cold = tail_window(log[:position], limit, complete=True)
            assert view.events == cold
            assert view.messages == expected_messages(view.events)
            assert view.last_seq == (log[position - 1].seq if position else 0)
        if position == len(log):
            break
        batch = log[position : position + data.draw(st.integers(1, 6))]
        position += len(batch)
        cache.appended(SID, batch, batch[-1].seq, compaction_required=False)


def test_a_session_past_its_share_keeps_its_newest_events() -> None:
    budget = CacheBudget(8 * 64 * 1024)  # a session may hold 64 KiB
    cache = RecentCache(cap=1000, budget=budget)
    log = _log([10_000] * 20)  # about 200 KiB
    _seed(cache, SID, log[:1])
    cache.appended(SID, log[1:], 20, compaction_required=False)
    entry = cache._entries[SID]
    assert not entry.complete
    assert 0 < entry.nbytes <= budget.session_bytes - budget.session_bytes // 8
    assert entry.events == log[-len(entry.events) :]
    newest = cache.window(SID, 2)
    assert newest is not None and newest.events == log[-2:]
    assert cache.window(SID, 20) is None  # older events: from the store
    # One event alone over the share: nothing of the session is kept but its state.
    cache.appended(SID, _log([600_000] * 21)[20:], 21, compaction_required=False)
    assert entry.events == [] and cache.held_bytes == budget.held == 0
    assert cache.window(SID, 1) is None
    assert cache.cached_strategy(SID) == (True, None)


def test_caches_sharing_a_budget_give_up_their_least_recently_used_sessions() -> None:
    one = event_bytes(_log([4000])[0])
    budget = CacheBudget(8 * 3 * one)  # 24 events in all, 3 a session
    a, b = RecentCache(cap=100, budget=budget), RecentCache(cap=100, budget=budget)
    for cache, name in ((a, "a"), (b, "b")):
        for n in range(1, 5):
            _seed(cache, f"{name}{n}", _log([4000] * 3, f"{name}{n}"))
    assert budget.held == 24 * one == a.held_bytes + b.held_bytes
    assert a.window("a1", 1) is not None  # a is used last, and a1 within it
    _seed(b, "b5", _log([4000] * 3, "b5"))  # b is the newest now: a's oldest session goes
    assert list(a._entries) == ["a3", "a4", "a1"]
    assert list(b._entries) == ["b1", "b2", "b3", "b4", "b5"]
    assert budget.held == 24 * one and budget.peak == 27 * one
    _seed(a, "a5", _log([4000] * 3, "a5"))  # and now b's oldest
    assert list(b._entries) == ["b2", "b3", "b4", "b5"]
    assert budget.held == a.held_bytes + b.held_bytes == 24 * one
    # A cache emptied (its actor hibernated) holds nothing and is no longer referenced.
    b.clear()
    assert budget.held == a.held_bytes == 12 * one and list(budget._caches.values()) == [a]
    a.clear()
    assert budget.held == 0 and budget._caches == {}


def test_forget_and_the_session_limit_release_their_bytes() -> None:
    budget = CacheBudget()
    cache = RecentCache(cap=100, max_sessions=2, budget=budget)
    for sid in ("s1", "s2", "s3"):  # the third pushes s1 out
        _seed(cache, sid, _log([100] * 4, sid))
    assert set(cache._entries) == {"s2", "s3"}
    assert budget.held == cache.held_bytes
    cache.forget("s2")
    assert budget.held == cache.held_bytes == sum(event_bytes(e) for e in _log([100] * 4))
    cache.forget("s3")
    assert budget.held == 0 and budget._caches == {}
