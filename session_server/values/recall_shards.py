"""Recall index shards: which shard of the full-text index holds an event (pure).

The index is split into shards (FTS5 tables ``events_fts_<n>``, ``storage.recall_shards``)
of bounded size, so that erasing a deleted event's postings (FTS5 keeps them until its
segments merge) rewrites only the event's shard: a delete costs what its shards hold,
not what the whole index holds.

A shard owns a range of event rowids: from its ``first_rowid`` up to the next shard's
``first_rowid``. An event belongs to the shard with the greatest ``first_rowid`` not
above its rowid (its *holder*), so a delete finds the shard an insert chose. A new
shard starts at a rowid only when that rowid's holder is full (``SHARD_CHARS``) and holds
no event at or after it (``last_rowid`` below it): no event already indexed changes its
holder, whatever order events are indexed in (new turns, the backfill of an old file,
rowids reused after a delete of the newest events).
"""

from __future__ import annotations

from typing import Final

import msgspec

__all__ = ["EVENT_OVERHEAD", "SHARD_CHARS", "NewShard", "Shard", "grown", "place"]

SHARD_CHARS: Final = 4 * 1024 * 1024
"""Indexed text a shard takes before new events start the next one: the bound of what a
delete rewrites (an event's text is at most ``recall.MAX_INDEXED_CHARS`` more)."""
EVENT_OVERHEAD: Final = 64
"""What one event counts beside its text (its rowid, positions and size rows)."""


class Shard(msgspec.Struct, frozen=True):
    """One shard's row in ``events_fts_shards``."""

    shard: int
    first_rowid: int
    last_rowid: int
    """The highest rowid it ever indexed (``first_rowid - 1``: none yet)."""
    chars: int
    """Text indexed into it so far (deletes do not lower it)."""


class NewShard(msgspec.Struct, frozen=True):
    """Start a new shard at ``first_rowid``."""

    first_rowid: int


def place(rowid: int, holder: Shard | None, max_chars: int = SHARD_CHARS) -> Shard | NewShard:
    """Where to index the event ``rowid`` given its holder (the shard with the greatest
    ``first_rowid`` not above it, or ``None``): the holder, or a new shard starting at
    ``rowid`` when there is none or it is full and holds nothing at or after ``rowid``."""
    if holder is None:
        return NewShard(rowid)
    if holder.first_rowid > rowid:
        raise ValueError(f"shard {holder.shard} starts after rowid {rowid}")
    if holder.chars >= max_chars and holder.last_rowid < rowid:
        return NewShard(rowid)
    return holder


def grown(shard: Shard, rowid: int, text_chars: int) -> Shard:
    """``shard`` after indexing the event ``rowid`` of ``text_chars`` characters."""
    return Shard(
        shard.shard,
        shard.first_rowid,
        max(shard.last_rowid, rowid),
        shard.chars + text_chars + EVENT_OVERHEAD,
    )
