"""The byte bound of the recent-events caches (pure, no I/O).

Every actor keeps recent events per session (``values.recent.RecentCache``): at most
``cap`` events of at most 64 sessions, and each event's content can be as large as a
frame. ``CacheBudget`` bounds the bytes they hold together: the caches of one registry
share one budget, each counts what it keeps with ``event_bytes`` (an estimate from what
is at hand, nothing encoded for an ordinary event), and past ``max_bytes`` the least
recently used session of the least recently used cache goes first. One session's own
events are held to ``session_bytes`` (an eighth of the budget): past it the session
keeps only its newest events and its other windows are read from the store.

Single-threaded, like the caches: every call comes from the event loop.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any, Final, Protocol

import msgspec

from .events import SessionEvent

__all__ = [
    "DEFAULT_CACHE_BYTES",
    "EVENT_OVERHEAD",
    "CacheBudget",
    "add_sizes",
    "event_bytes",
    "json_bytes",
    "text_bytes",
]

DEFAULT_CACHE_BYTES: Final = 256 * 1024 * 1024
"""What the recent caches of one registry hold together by default (see docs/decisions.md,
"Caches")."""

EVENT_OVERHEAD: Final = 640
"""Bytes a cached event costs besides its content and JSON values: the event struct
with its strings' headers, its id and numbers (about 330) and what the cache adds, its message, its places in
the lists, running totals, tail index and memoised views (263, measured with
tracemalloc over 20,000 small events); rounded up."""

# A JSON value (metadata, tool-call arguments, a compaction record) is the one field whose
# size is not at hand: msgspec encodes it (C, 0.1 us for a tool call's arguments; a walk in
# Python cost ten times more). A small one counts 64 bytes a JSON byte (an empty object in
# two bytes takes 64); in a larger one every separator or opening bracket counts for a
# value's overhead in memory. Either way the estimate is never under what the decoded value
# holds (0.06x to 0.94x of it over lists of numbers, objects, short and long strings, empty
# and nested containers: ``tests/session_server/values/test_cache_budget.py``).
_VALUE_OVERHEAD: Final = 128
_SMALL_JSON: Final = 256
_SEPARATORS: Final = b",:[{"
_encode = msgspec.json.encode


def json_bytes(value: Any) -> int:
    """An estimate (never under) of the memory a decoded JSON value holds."""
    raw = _encode(value)
    if len(raw) <= _SMALL_JSON:
        return 64 * len(raw) + _VALUE_OVERHEAD
    values = len(raw) - len(raw.translate(None, _SEPARATORS)) + 1
    return len(raw) + _VALUE_OVERHEAD * values


def text_bytes(text: str) -> int:
    """What a str holds, about: a byte a character when ASCII, else at most four."""
    return len(text) if text.isascii() else 4 * len(text)


def add_sizes(sizes: list[int], events: Iterable[SessionEvent]) -> None:
    """Extend the running total ``sizes`` (its last item: the total so far) with
    ``event_bytes`` of each of ``events``: one call a commit, no call an event (every
    commit runs it for each of its events)."""
    size = sizes[-1]
    for event in events:
        content = event.content
        size += EVENT_OVERHEAD + (len(content) if content.isascii() else 4 * len(content))
        if (
            event.tool_calls is not None
            or event.metadata is not None
            or event.images is not None
            or event.reasoning is not None
            or event.compaction is not None
        ):
            size += _rare_fields_bytes(event)
        sizes.append(size)


def event_bytes(event: SessionEvent) -> int:
    """What caching ``event`` (and its message) costs, about: its content's size, and
    for the fields most events do not have, theirs."""
    sizes = [0]
    add_sizes(sizes, (event,))
    return sizes[1]


def _rare_fields_bytes(event: SessionEvent) -> int:
    """``event_bytes`` of the fields besides the content."""
    size = 0
    for call in event.tool_calls or ():
        # Ids and names are short: 4 bytes a character whatever they hold.
        size += _VALUE_OVERHEAD + 4 * (len(call.id) + len(call.name))
        arguments = call.arguments
        size += text_bytes(arguments) if type(arguments) is str else json_bytes(arguments)
    if event.reasoning is not None:
        size += text_bytes(event.reasoning)
    if event.images is not None:
        size += _VALUE_OVERHEAD * len(event.images) + sum(map(text_bytes, event.images))
    if event.metadata is not None:
        size += json_bytes(event.metadata)
    if event.compaction is not None:
        size += json_bytes(event.compaction)
    return size


class BudgetedCache(Protocol):
    """What the budget asks of a cache sharing it."""

    def evict_oldest(self) -> None:
        """Drop the least recently used session (``CacheBudget.release`` its bytes)."""
        ...


class CacheBudget:
    """Bytes held by the caches sharing this budget, at most ``max_bytes`` once a change
    settled; the caches holding any, least recently used first."""

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
            raise ValueError("max_bytes: must be a non-negative int")
        self.max_bytes = max_bytes
        # A session holding more is trimmed to its newest events (hysteresis: to 7/8).
        self.session_bytes = max_bytes // 8
        self.held = 0
        self.peak = 0
        # Strong references, only while a cache holds bytes: a cache that is emptied
        # (``clear`` when its actor hibernates) leaves.
        self._caches: OrderedDict[int, BudgetedCache] = OrderedDict()
        # The cache used last (already at the end of ``_caches``): a cache checks it
        # before calling ``use``, which the turns of one agent then never need.
        self.newest: BudgetedCache | None = None

    def __repr__(self) -> str:
        return f"CacheBudget(held={self.held}, max_bytes={self.max_bytes})"

    def use(self, cache: BudgetedCache) -> None:
        """``cache`` was used: it is the last to give up its sessions."""
        key = id(cache)
        caches = self._caches
        if key in caches:
            caches.move_to_end(key)
        else:
            caches[key] = cache
        self.newest = cache

    def add(self, cache: BudgetedCache, delta: int) -> None:
        """``cache`` holds ``delta`` bytes more (or fewer); evict past the bound. The
        cache calls it when it is consistent: an eviction may come back to it."""
        self.held += delta
        if self.held > self.peak:
            self.peak = self.held
        if delta > 0 and self.newest is not cache:
            self.use(cache)
        while self.held > self.max_bytes and self._caches:
            oldest = next(iter(self._caches.values()))
            oldest.evict_oldest()

    def release(self, cache: BudgetedCache, freed: int, *, empty: bool) -> None:
        """``cache`` dropped ``freed`` bytes (``empty``: it holds none now)."""
        self.held -= freed
        if empty:
            self._caches.pop(id(cache), None)
            if self.newest is cache:
                self.newest = None
