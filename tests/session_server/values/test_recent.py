"""The recent-events cache: counts over a cached run of the log (pure)."""

from __future__ import annotations

import msgspec

from session_server.values.events import SessionEvent
from session_server.values.plans import ContextWindow, SessionState
from session_server.values.recent import RecentCache


def run(first: int, n: int, compaction_at: int | None = None) -> list[SessionEvent]:
    return [
        SessionEvent(
            id=f"e{seq}",
            session_id="s",
            seq=seq,
            action="compaction" if seq == compaction_at else "agent_message",
        )
        for seq in range(first, first + n)
    ]


def window_of(events: list[SessionEvent], complete: bool = True) -> ContextWindow:
    state = SessionState("s", last_seq=events[-1].seq if events else 0)
    return ContextWindow(events, state, list(events), complete)


def seeded(events: list[SessionEvent], complete: bool) -> RecentCache:
    cache = RecentCache(cap=100)
    cache.seed("s", window_of(events, complete), version=0)
    return cache


def test_count_between_counts_the_range_without_compaction_events() -> None:
    cache = seeded(run(1, 20, compaction_at=7), complete=True)
    assert cache.count_between("s", 1, 21) == 19
    assert cache.count_between("s", 5, 10) == 4  # 5, 6, 8, 9
    assert cache.count_between("s", 10, 10) == 0
    assert cache.count_between("s", 15, 99) == 6
    assert cache.count_between("other", 1, 5) is None


def test_count_between_says_none_when_the_run_starts_too_late() -> None:
    cache = seeded(run(10, 5), complete=False)
    assert cache.count_between("s", 5, 12) is None
    assert cache.count_between("s", 11, 13) == 2
    more = [msgspec.structs.replace(e, seq=e.seq + 5, id=f"x{e.seq}") for e in run(10, 3)]
    cache.appended("s", more, last_seq=17, compaction_required=False)
    assert cache.count_between("s", 12, 18) == 6


def test_a_read_planned_before_a_commit_is_refused() -> None:
    cache = RecentCache(cap=100)
    planned = cache.version("s")
    cache.appended("s", run(1, 1), last_seq=1, compaction_required=False)
    cache.seed("s", window_of([]), planned)  # read before the commit: stale
    assert cache.window("s", 10) is None
    cache.seed("s", window_of(run(1, 1)), cache.version("s"))
    view = cache.window("s", 10)
    assert view is not None and [e.seq for e in view.events] == [1]


def test_versions_stay_bounded_and_a_drop_never_revives_a_stale_read() -> None:
    """An actor that writes to many sessions keeps versions of at most ``max_versions``;
    dropping them never lets a read planned before a commit pass for current."""
    cache = RecentCache(cap=100, max_sessions=2)
    assert cache.max_versions == 8
    planned = cache.version("s")  # before any version exists
    cache.appended("s", run(1, 1), last_seq=1, compaction_required=False)
    after_commit = cache.version("s")
    for n in range(1_000):  # other sessions' commits: the versions are dropped many times
        cache.forget(f"other-{n}")
        assert len(cache._versions) <= cache.max_versions
    for stale in (planned, after_commit - 1):
        cache.seed("s", window_of([]), stale)
        assert cache.window("s", 10) is None
    # Every version ever handed out differs from the current one of a dropped session.
    assert cache.version("s") not in {planned, after_commit}
    cache.seed("s", window_of(run(1, 1)), cache.version("s"))
    assert cache.window("s", 10) is not None
