"""The actor's cache of recently written events per session (pure, no I/O).

Building a context must not decode rows it has already seen: the actor keeps, per
session, a complete run of the log up to the last commit (what it read once, plus every
event it committed since), with the session state a build needs (last seq, latest
compaction record, the pressure flag, the persisted strategy). ``window`` answers from it
exactly as ``store.context_window`` would, or says it cannot (``None``) and the actor
reads the store and ``seed``s the cache.

Each cached event's message (``event_to_message``) is converted once, when a window
first shows it, and kept beside the event until the event leaves the cache: a build
reuses the messages of the events it showed before (messages are frozen values).

Staleness: every commit that changes a session's events bumps its version; a seed read
that raced with a commit is refused, and deletes drop the session's entry.

Bytes: what the cache keeps counts against a ``CacheBudget`` (shared by the caches of a
registry; ``cache_budget``): past it the least recently used sessions go, and a session
whose own events pass ``session_bytes`` keeps only its newest ones (as at the cap: its
windows reaching further back are read from the store).
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from collections.abc import Sequence
from operator import attrgetter
from typing import Any, cast

import msgspec

from .cache_budget import CacheBudget, add_sizes
from .codec import event_to_message
from .events import ContextMessage, SessionEvent
from .plans import ContextWindow
from .records import CompactionRecord
from .repair import RepairScan, needs_repair, resumes_scan, scan_repair
from .tail_index import TailIndex
from .turns import drop_orphan_results, tail_window

__all__ = ["RecentCache", "SessionView", "ViewMessages"]


class ViewMessages(msgspec.Struct):
    """The messages of a view's events as the cache keeps them, with what the builder
    would otherwise find in a pass over the events.

    ``messages``: ``event_to_message`` of each event (shared with the cache: never to be
    modified); ``plain``: no ``compaction`` event among the events and no message
    ``None``; ``first_seq``: the lowest seq among the events (0 when there are none);
    ``tokens``: the total of the stored token counts of the events other than
    ``compaction`` ones, ``None`` when one has no count; ``clean``: ``plain`` and
    ``needs_repair(messages)`` is ``False`` (the cache extends the check of the last
    clean run instead of passing over every message again).
    """

    messages: list[ContextMessage | None]
    plain: bool
    first_seq: int
    tokens: int | None
    clean: bool = False


class SessionView(msgspec.Struct):
    """A context window and the session state it was read with (``messages`` when the
    cache made the view)."""

    events: list[SessionEvent]
    last_seq: int
    record: CompactionRecord | None = None
    compaction_required: bool = False
    strategy: dict[str, Any] | None = None
    messages: ViewMessages | None = None

    @classmethod
    def of(cls, window: ContextWindow) -> SessionView:
        return cls(
            events=window.events,
            last_seq=window.state.last_seq,
            record=window.record,
            compaction_required=window.state.compaction_required,
            strategy=window.state.strategy,
        )


# Windows memoised per entry (one per distinct ``limit`` asked since the last change).
_MAX_VIEWS = 4


_seq = attrgetter("seq")  # a C key for bisect (a Python function costs a call per probe)


class _Entry:
    __slots__ = (
        "compaction_required",
        "compactions",
        "complete",
        "converted",
        "events",
        "index",
        "last_seq",
        "messages",
        "record",
        "repair",
        "sizes",
        "strategy",
        "tokens",
        "untokened",
        "views",
    )

    def __init__(self, events: list[SessionEvent], complete: bool, view: SessionView) -> None:
        self.events = events
        # Where the user messages and results of ``events`` are (``TailIndex``): a window
        # passes over those only. Extended and trimmed with ``events``.
        self.index = TailIndex(events)
        # ``event_to_message`` of ``events[i]`` once a window showed it (``None`` before):
        # extended and trimmed with ``events``, so bounded by the same cap.
        self.messages: list[ContextMessage | None] = [None] * len(events)
        # Indexes ``[lo, hi)`` whose messages are all converted (one run: a window moves
        # forward, so only its newest events fall outside the run the last one left).
        self.converted = (0, 0)
        # ``(lo, hi, scan)``: ``messages[lo:hi]`` need no repair and ``scan`` is where
        # ``scan_repair`` stands after them (``None``: no such run known). Trimmed with
        # the events, dropped when its start goes: its ids seen stay bounded by the cap.
        self.repair: tuple[int, int, RepairScan] | None = None
        # Running totals over ``events`` (index i: the events before ``events[i]``; one
        # more entry than events, trimmed with them, so differences stay exact): compaction
        # events, stored token counts of the others, and how many of those have none.
        self.compactions = [0]
        self.tokens = [0]
        self.untokened = [0]
        # And of ``event_bytes`` (``cache_budget``): the entry's bytes are the last
        # minus the first.
        self.sizes = [0]
        self.add_totals(events)
        self.complete = complete
        self.last_seq = view.last_seq
        self.record = view.record
        self.compaction_required = view.compaction_required
        self.strategy = view.strategy
        # The window per limit, computed once per change of the entry: a turn asks for
        # the same window several times (build, pressure check, snapshot) between commits.
        # Every mutation of the entry clears it.
        self.views: dict[int, SessionView | None] = {}

    def add_totals(self, events: Sequence[SessionEvent]) -> None:
        compactions, tokens, untokened = self.compactions[-1], self.tokens[-1], self.untokened[-1]
        for event in events:
            if event.action == "compaction":
                compactions += 1
            elif event.token_count is None:
                untokened += 1
            else:
                tokens += event.token_count
            self.compactions.append(compactions)
            self.tokens.append(tokens)
            self.untokened.append(untokened)
        add_sizes(self.sizes, events)

    @property
    def nbytes(self) -> int:
        """What the entry counts against the budget (``event_bytes`` of its events)."""
        return self.sizes[-1] - self.sizes[0]

    def fit(self, limit: int) -> None:
        """Over ``limit`` bytes: drop the oldest events until the rest holds at most 7/8
        of it (so that the next commits do not trim again at once)."""
        sizes = self.sizes
        if sizes[-1] - sizes[0] > limit:
            self.trim(bisect.bisect_left(sizes, sizes[-1] - (limit - limit // 8)))
            self.complete = False

    def trim(self, excess: int) -> None:
        """Drop the ``excess`` oldest events (and what is kept beside them)."""
        del self.events[:excess]
        self.index.trim(excess)
        del self.messages[:excess]
        del self.compactions[:excess]
        del self.tokens[:excess]
        del self.untokened[:excess]
        del self.sizes[:excess]
        lo, hi = self.converted
        self.converted = (max(0, lo - excess), max(0, hi - excess))
        if self.repair is not None:
            lo, hi, scan = self.repair
            self.repair = None if lo < excess else (lo - excess, hi - excess, scan)


class RecentCache:
    """Recent events of at most ``max_sessions`` sessions (least recently used go first),
    at most ``cap`` events each (a session that reached the cap keeps at least
    ``cap - cap // 8``: it is trimmed by an eighth at a time), within the bytes of
    ``budget`` (a budget of its own, ``DEFAULT_CACHE_BYTES``, when none is shared)."""

    def __init__(self, cap: int, max_sessions: int = 64, budget: CacheBudget | None = None) -> None:
        self.cap = cap
        self.max_sessions = max_sessions
        self.budget = CacheBudget() if budget is None else budget
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        # Versions come from one clock for every session, so they never repeat. At most
        # ``max_versions`` sessions keep one (not every session the actor ever wrote);
        # past it they are all dropped and every session without one is at ``_floor``,
        # above any version handed out before: a read planned before the drop is then
        # refused (and read again), never taken for current.
        self.max_versions = 4 * max(1, max_sessions)
        self._versions: dict[str, int] = {}
        self._clock = 0
        self._floor = 0

    def version(self, session_id: str) -> int:
        return self._versions.get(session_id, self._floor)

    def _bump(self, session_id: str) -> None:
        if len(self._versions) >= self.max_versions and session_id not in self._versions:
            self._versions.clear()
            self._clock += 1
            self._floor = self._clock
        self._clock += 1
        self._versions[session_id] = self._clock

    @property
    def held_bytes(self) -> int:
        """The bytes this cache counts against its budget."""
        return sum(entry.nbytes for entry in self._entries.values())

    def clear(self) -> None:
        freed = self.held_bytes
        self._entries.clear()
        self.budget.release(self, freed, empty=True)

    def forget(self, session_id: str) -> None:
        """Drop a session's entry (its events were deleted, or it was)."""
        entry = self._entries.pop(session_id, None)
        if entry is not None:
            self.budget.release(self, entry.nbytes, empty=not self._entries)
        self._bump(session_id)

    def evict_oldest(self) -> None:
        """Drop the least recently used session's entry (the budget is short)."""
        freed = self._entries.popitem(last=False)[1].nbytes if self._entries else 0
        self.budget.release(self, freed, empty=not self._entries)

    def cached_strategy(self, session_id: str) -> tuple[bool, dict[str, Any] | None]:
        """``(True, strategy)`` with the persisted strategy of a cached session (kept
        current by ``strategy_changed``), without computing a window; ``(False, None)``
        when the session is not cached."""
        entry = self._entries.get(session_id)
        return (False, None) if entry is None else (True, entry.strategy)

    def count_between(self, session_id: str, low: int, high: int) -> int | None:
        """Non-compaction events with ``low <= seq < high``, when the cached run holds
        that whole range (``None``: the cache cannot say)."""
        entry = self._entries.get(session_id)
        if entry is None or not entry.events:
            return None
        events = entry.events
        if not entry.complete and events[0].seq > low:
            return None
        # The run is in seq order: find the range; the running count of compaction
        # events tells how many of it are not.
        start = bisect.bisect_left(events, low, key=_seq)
        stop = bisect.bisect_left(events, high, lo=start, key=_seq)
        return stop - start - (entry.compactions[stop] - entry.compactions[start])

    def seed(self, session_id: str, window: ContextWindow, version: int) -> SessionView:
        """Keep what a store read returned, unless a commit happened since ``version``;
        the view of the window either way."""
        view = SessionView.of(window)
        if self.version(session_id) == version and len(window.suffix) <= self.cap:
            entry = _Entry(list(window.suffix), window.complete, view)
            entry.fit(self.budget.session_bytes)
            old = self._entries.pop(session_id, None)
            delta = entry.nbytes - (0 if old is None else old.nbytes)
            self._entries[session_id] = entry
            while len(self._entries) > self.max_sessions:
                delta -= self._entries.popitem(last=False)[1].nbytes
            self.budget.add(self, delta)
        return view

    def appended(
        self,
        session_id: str,
        stored: Sequence[SessionEvent],
        last_seq: int,
        compaction_required: bool,
    ) -> None:
        """Record committed events (and the flag the commit left)."""
        self._bump(session_id)
        entry = self._entries.get(session_id)
        if entry is None:
            return
        entry.views.clear()
        entry.events.extend(stored)
        entry.index.extend(stored)
        entry.messages.extend([None] * len(stored))
        sizes = entry.sizes
        before = sizes[-1] - sizes[0]
        entry.add_totals(stored)
        entry.last_seq = last_seq
        entry.compaction_required = compaction_required
        for event in stored:
            if event.action == "compaction":  # the test of ``CompactionRecord.of``, inlined
                record = CompactionRecord.of(event)
                if record is not None:
                    entry.record = record
        excess = len(entry.events) - self.cap
        if excess > 0:
            # An eighth of the cap more at once: dropping a list's head moves every item
            # after it, which at the cap was five lists of ``cap`` items on every commit.
            entry.trim(excess + self.cap // 8)
            entry.complete = False
        budget = self.budget
        if sizes[-1] - sizes[0] > budget.session_bytes:
            entry.fit(budget.session_bytes)
        budget.add(self, sizes[-1] - sizes[0] - before)

    def flag_changed(self, session_id: str, compaction_required: bool) -> None:
        self._bump(session_id)  # a seed read before this change must not be kept
        entry = self._entries.get(session_id)
        if entry is not None:
            entry.views.clear()
            entry.compaction_required = compaction_required

    def strategy_changed(self, session_id: str, strategy: dict[str, Any] | None) -> None:
        self._bump(session_id)
        entry = self._entries.get(session_id)
        if entry is not None:
            entry.views.clear()
            entry.strategy = strategy

    def window(self, session_id: str, limit: int) -> SessionView | None:
        """The view ``store.context_window`` would give, or ``None`` when unsure.

        The same object until the entry changes: callers must not modify it.
        """
        entry = self._entries.get(session_id)
        if entry is None:
            return None
        self._entries.move_to_end(session_id)
        if self.budget.newest is not self:
            self.budget.use(self)
        if limit in entry.views:
            return entry.views[limit]
        view = self._window(entry, limit)
        if len(entry.views) >= _MAX_VIEWS:
            entry.views.clear()  # limits are client-chosen: bound the memo
        entry.views[limit] = view
        return view

    @staticmethod
    def _window(entry: _Entry, limit: int) -> SessionView | None:
        from_seq = None if entry.record is None else entry.record.from_seq
        events: list[SessionEvent] | None
        if from_seq is None:
            events = entry.index.window(entry.events, limit, complete=entry.complete)
        else:
            covered = entry.complete or (bool(entry.events) and entry.events[0].seq <= from_seq)
            sub = [e for e in entry.events if e.seq >= from_seq]
            if covered and len(sub) <= limit:
                events = drop_orphan_results(sub)
            else:
                # Widening below from_seq is clamped by the store: let it decide.
                events = tail_window(sub, limit, complete=False)
        if events is None:
            return None
        return SessionView(
            events=events,
            last_seq=entry.last_seq,
            record=entry.record,
            compaction_required=entry.compaction_required,
            strategy=entry.strategy,
            messages=_messages(entry, events),
        )


def _messages(entry: _Entry, events: list[SessionEvent]) -> ViewMessages:
    """The ``ViewMessages`` of ``events`` (cached events, in order), converting only the
    events no window showed before."""
    if not events:
        return ViewMessages([], True, 0, 0, True)
    cached, memo = entry.events, entry.messages
    # Seqs are unique and in order in the cache: where its first event is. A tail window
    # ends at the cache's end, where it is found without a search.
    start = len(cached) - len(events)
    if start < 0 or cached[start] is not events[0]:
        start = bisect.bisect_left(cached, events[0].seq, key=_seq)
    stop = start + len(events)
    if stop <= len(cached) and cached[start] is events[0] and cached[stop - 1] is events[-1]:
        # A run of the cache (a subsequence with its first and last where a run has
        # them is that run): the messages are a slice, the totals differences; only new
        # events are converted.
        lo, hi = entry.converted
        plain = True
        if start < lo or stop > hi:
            for i in (*range(start, min(stop, lo)), *range(max(start, hi), stop)):
                if memo[i] is None:
                    memo[i] = event_to_message(cached[i])
                    plain = plain and memo[i] is not None
            if plain:  # no message None: [start, stop) is converted, joined with the run
                joined = lo < hi and lo <= stop and start <= hi
                entry.converted = (min(lo, start), max(hi, stop)) if joined else (start, stop)
        out = memo[start:stop]
        plain = plain and entry.compactions[stop] == entry.compactions[start]
        tokens = None
        if entry.untokened[stop] == entry.untokened[start]:
            tokens = entry.tokens[stop] - entry.tokens[start]
        clean = plain and _clean(entry, start, stop, cast(list[ContextMessage], out))
        return ViewMessages(out, plain, events[0].seq, tokens, clean)
    # Some events left out (orphan results): match the rest in the cache, in order.
    messages: list[ContextMessage | None] = []
    i = start
    for event in events:
        while i < len(cached) and cached[i] is not event:
            i += 1
        if i == len(cached):
            messages.append(event_to_message(event))  # not a cached event: never kept
            continue
        msg = memo[i]
        if msg is None:
            msg = memo[i] = event_to_message(event)
        messages.append(msg)
    shown = [e for e in events if e.action != "compaction"]
    counts = [e.token_count for e in shown]
    plain = len(shown) == len(events) and None not in messages
    return ViewMessages(
        messages,
        plain,
        min(e.seq for e in events),
        None if None in counts else sum(c or 0 for c in counts),
        plain and not needs_repair(cast(list[ContextMessage], messages)),
    )


def _clean(entry: _Entry, start: int, stop: int, messages: list[ContextMessage]) -> bool:
    """Whether ``messages`` (the cache's ``[start, stop)``, all converted) need no
    repair: the kept scan continued over the messages after its run when the view may
    take it over (``scan_repair``'s rule), one pass over ``messages`` otherwise."""
    if entry.repair is not None:
        lo, hi, scan = entry.repair
        if lo <= start <= hi <= stop and (start == lo or resumes_scan(messages[0])):
            extended = scan_repair(cast(list[ContextMessage], entry.messages[hi:stop]), scan)
            if extended is not None:
                entry.repair = (lo, stop, extended)
                return True
        entry.repair = None  # advanced in part, or not a run the view can take over
    fresh = scan_repair(messages)
    if fresh is None:
        return False
    entry.repair = (start, stop, fresh)
    return True
