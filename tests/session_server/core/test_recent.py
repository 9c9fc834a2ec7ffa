"""The recent-events cache: counts over a cached run of the log (pure)."""

from __future__ import annotations

import msgspec

from session_server.core.events import SessionEvent
from session_server.core.plans import ContextWindow, SessionState
from session_server.core.recent import RecentCache


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


def seeded(events: list[SessionEvent], complete: bool) -> RecentCache:
    cache = RecentCache(cap=100)
    state = SessionState("s", last_seq=events[-1].seq if events else 0)
    cache.seed("s", ContextWindow(events, state, list(events), complete), version=0)
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
