"""The recent cache's index of its run of the log (pure): where the user messages and
tool results are, so a tail window walks those only (``TailIndex.window`` equals
``turns.tail_window`` on the run it indexes)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence

from .events import SessionEvent
from .turns import _safe_start, _widened_start, tail_window, window_from

__all__ = ["TailIndex"]


class TailIndex:
    """Where the user messages and tool results of a run of the log are, and the call each
    result's id last named before it: kept as events are appended to the run (``extend``)
    and dropped from its start (``trim``), so that ``window`` answers ``tail_window`` in
    passes over the window's user messages and results only, not over all its events.

    ``window(events, ...)`` equals ``tail_window(events, ...)`` whenever ``events`` is the
    run indexed (every event given to ``extend`` since creation, minus those ``trim``
    dropped). Positions are absolute (``base`` is that of ``events[0]``), so a trim moves
    nothing. Where the pairing needs more than a call before its result in the loaded
    events (a result before its call, an orphan, no id), ``window_from`` decides.
    """

    __slots__ = ("base", "end", "latest", "prev", "results", "users")

    def __init__(self, events: Sequence[SessionEvent] = ()) -> None:
        self.base = 0  # the position of the run's first event
        self.end = 0  # the position after its last
        self.users: list[int] = []  # positions of the user messages
        self.results: list[int] = []  # positions of the tool results
        # Per result (beside ``results``): the position of the latest call with its id
        # before it, -1 for none (or no id): ``_pair_up``'s ``latest`` at that result.
        self.prev: list[int] = []
        self.latest: dict[str, int] = {}  # call id -> position of its latest call
        self.extend(events)

    def extend(self, events: Sequence[SessionEvent]) -> None:
        """``events`` were appended to the run."""
        pos = self.end
        latest = self.latest
        for ev in events:
            action = ev.action
            if action == "user_message":
                self.users.append(pos)
            elif action == "tool_call_request":
                for c in ev.tool_calls or ():
                    latest[c.id] = pos
            elif action == "tool_result":
                call_id = ev.tool_call_id
                self.results.append(pos)
                self.prev.append(-1 if call_id is None else latest.get(call_id, -1))
            pos += 1
        self.end = pos

    def trim(self, excess: int) -> None:
        """The ``excess`` first events of the run were dropped."""
        self.base += excess
        del self.users[: bisect_left(self.users, self.base)]
        k = bisect_left(self.results, self.base)
        del self.results[:k]
        del self.prev[:k]
        if len(self.latest) > 2 * (self.end - self.base) + 64:
            # Ids whose latest call was dropped: a result naming one finds a position
            # before the run, which every window treats as no call (bounded with the run).
            self.latest = {c: p for c, p in self.latest.items() if p >= self.base}

    def window(
        self, events: Sequence[SessionEvent], limit: int, *, complete: bool
    ) -> list[SessionEvent] | None:
        """``tail_window(events, limit, complete=complete)`` (see the class docstring)."""
        n = len(events)
        cut = n - limit
        if cut <= 0:
            return tail_window(events, limit, complete=complete)
        base, results, prev = self.base, self.results, self.prev
        # ``widening_turns`` of ``events[cut:]``: a result is settled exactly when a call
        # with its id precedes it in the window, i.e. its latest call is at ``cut`` or after.
        first = bisect_left(results, base + cut)
        if all(prev[k] >= base + cut for k in range(first, len(results))):
            return list(events[cut:])
        needed = {events[results[k] - base].turn or 0 for k in range(first, len(results))}
        needed.add(events[cut].turn or 0)
        # ``tail_window``'s walk back, over the user messages only (it skips the others).
        lower = _widened_start(events, cut, needed, reversed(self.users), base, complete=complete)
        if lower is None:
            return None
        # ``window_from(events[lower:], cut - lower)`` when every result there has a call
        # with its id before it there: ``_pair_up`` pairs it with the latest one, finds no
        # orphan and reads no turn.
        origin = base + lower
        pairs: list[tuple[int, int]] = []
        for k in range(bisect_left(results, origin), len(results)):
            call = prev[k]
            if call < origin:
                return window_from(events[lower:], cut - lower)
            pairs.append((call - origin, results[k] - origin))
        if cut > lower:
            return list(events[lower + self._safe_start(events, lower, cut - lower, pairs) :])
        return list(events[lower:])

    def _safe_start(
        self, events: Sequence[SessionEvent], lower: int, start: int, pairs: list[tuple[int, int]]
    ) -> int:
        """``_safe_start(events[lower:], start, pairs)`` (``0 < start``; ``events`` the
        run), trying only the user messages the index knows instead of summing the pairs'
        spans over every position: a span ``(lo, hi)`` splits a start ``s`` exactly when
        ``lo < s <= hi``."""
        origin = self.base + lower
        n = len(events) - lower
        start = min(start, n)
        spans = [(c, r) if c < r else (r, c) for c, r in pairs]
        if not any(lo < start <= hi for lo, hi in spans):
            return start
        # The turn boundaries ``_safe_start`` tries, nearest first and the earlier one at
        # equal distance: user messages at ``start - d`` and ``start + d`` for
        # ``0 < d < start`` (then 0). Few are ever tried: past a handful, the spans
        # summed once are cheaper than testing each candidate against every span.
        users = self.users
        left, first = bisect_left(users, origin + start) - 1, bisect_left(users, origin + 1)
        right = bisect_left(users, origin + start + 1)
        last = origin + min(2 * start - 1, n - 1)
        for _ in range(8):
            below = users[left] - origin if left >= first else None
            above = users[right] - origin if right < len(users) and users[right] <= last else None
            if below is not None and (above is None or start - below <= above - start):
                i, left = below, left - 1
            elif above is not None:
                i, right = above, right + 1
            else:
                return 0
            if not any(lo < i <= hi for lo, hi in spans):
                return i
        return _safe_start(events[lower:], start, pairs)
