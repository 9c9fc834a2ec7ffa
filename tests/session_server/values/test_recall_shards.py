"""Which shard holds an event (pure): an event indexed into a shard is always found in
that shard again, whatever is indexed or deleted later and in whatever order."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session_server.values.recall_shards import EVENT_OVERHEAD, NewShard, Shard, grown, place

MAX_CHARS = 100


def _holder(rowid: int, shards: dict[int, Shard]) -> Shard | None:
    """The shard with the greatest ``first_rowid`` not above ``rowid``."""
    below = [s for s in shards.values() if s.first_rowid <= rowid]
    return max(below, key=lambda s: s.first_rowid, default=None)


class Index:
    """The registry and the shards' rows, as the store keeps them, in memory."""

    def __init__(self) -> None:
        self.shards: dict[int, Shard] = {}
        self.rows: dict[int, int] = {}  # rowid -> shard
        self.sizes: dict[int, int] = {}  # rowid -> chars

    def index(self, rowid: int, chars: int) -> None:
        target = place(rowid, _holder(rowid, self.shards), MAX_CHARS)
        if isinstance(target, NewShard):
            assert target.first_rowid == rowid
            number = max(self.shards, default=0) + 1
            target = Shard(number, rowid, rowid - 1, 0)
        self.shards[target.shard] = grown(target, rowid, chars)
        self.rows[rowid] = target.shard
        self.sizes[rowid] = chars

    def delete(self, rowid: int) -> None:
        holder = _holder(rowid, self.shards)
        assert holder is not None and self.rows.pop(rowid) == holder.shard
        if holder.shard not in self.rows.values():  # left empty: dropped
            del self.shards[holder.shard]

    def check(self) -> None:
        for rowid, shard in self.rows.items():
            holder = _holder(rowid, self.shards)
            assert holder is not None and holder.shard == shard
            assert holder.first_rowid <= rowid <= holder.last_rowid


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["append", "append", "append", "backfill", "delete", "pop"]),
            st.integers(0, 60),
        ),
        max_size=120,
    )
)
def test_an_indexed_event_stays_in_the_shard_that_took_it(ops: list[tuple[str, int]]) -> None:
    index = Index()
    next_old = 1  # the backfill indexes old events (rowids 1..1000) upwards
    for op, n in ops:
        live = sorted(index.rows)
        if op == "append":  # rowid = max + 1, as SQLite assigns it (reused after a pop)
            index.index(max([1000, *live]) + 1, n)
        elif op == "backfill" and next_old <= 1000:
            index.index(next_old, n)
            next_old += 1 + n % 5
        elif op == "delete" and live:
            index.delete(live[n % len(live)])
        elif op == "pop" and live:
            index.delete(live[-1])
        index.check()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 40), min_size=1, max_size=200))
def test_appended_shards_stay_within_their_bound(sizes: list[int]) -> None:
    index = Index()
    for rowid, chars in enumerate(sizes, start=1):
        index.index(rowid, chars)
    for shard in index.shards.values():
        assert shard.chars < MAX_CHARS + max(sizes) + EVENT_OVERHEAD
    # and a shard is only started when the one before is full
    ordered = sorted(index.shards.values(), key=lambda s: s.first_rowid)
    assert all(s.chars >= MAX_CHARS for s in ordered[:-1])


def test_place() -> None:
    assert place(5, None, MAX_CHARS) == NewShard(5)
    roomy = Shard(1, 1, 9, MAX_CHARS - 1)
    assert place(10, roomy, MAX_CHARS) is roomy
    full = Shard(1, 1, 9, MAX_CHARS)
    assert place(10, full, MAX_CHARS) == NewShard(10)
    # a rowid the full shard already passed (reused after a delete) stays in it
    assert place(7, full, MAX_CHARS) is full
    with pytest.raises(ValueError, match="starts after"):
        place(0, full, MAX_CHARS)
    assert grown(full, 12, 3) == Shard(1, 1, 12, MAX_CHARS + 3 + EVENT_OVERHEAD)
