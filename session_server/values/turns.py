"""Turn grouping and tool-pair-safe windows (pure).

A turn starts at a ``user_message``; every later event belongs to it until the next user
message, except that a ``tool_result`` belongs to the turn of its call (matched by
``tool_call_id``) even when it arrives after the next user message. Events before the
first user message form turn 0.

A result pairs with the latest call with its id before it; only a result stored before
every call with its id pairs with the first such call after it *in its own turn*. A call
that reuses the id in a later turn never takes an earlier turn's result.

A window never separates a tool call from its results: a cut that would leave a result
without its call (or a call without its results) moves to the nearest turn boundary.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate
from operator import attrgetter
from typing import NamedTuple

import msgspec

from .events import SessionEvent

__all__ = [
    "Turn",
    "TurnPosition",
    "assign_turns",
    "drop_orphan_results",
    "group_turns",
    "number_turns",
    "safe_cut_points",
    "safe_window",
    "safe_window_start",
    "splits_tool_pair",
    "stored_calls_needed",
    "tail_window",
    "widening_turns",
    "window_from",
    "window_last_n",
]


class Turn(msgspec.Struct):
    number: int
    events: list[SessionEvent]


class TurnPosition(NamedTuple):
    """Where an event sits: its turn and the seq of the user message opening that turn
    (0 for turn 0, which has no opening message)."""

    turn: int
    start_seq: int


_LOG_START = TurnPosition(0, 0)
_TURN = attrgetter("turn")


def number_turns(
    events: Sequence[SessionEvent],
    *,
    first_seq: int = 1,
    last: TurnPosition = _LOG_START,
    calls: Mapping[str, TurnPosition] | None = None,
) -> tuple[list[TurnPosition], dict[str, TurnPosition]]:
    """The turn numbering rule, the only implementation (the store and every pure caller
    use it): positions of ``events`` appended from seq ``first_seq`` after a log whose
    last turn is ``last``.

    ``calls`` maps tool call ids already in the log to their positions. Returns the
    position of each event and the call ids this batch adds.
    """
    known = calls or {}
    added: dict[str, TurnPosition] = {}
    current = last
    out: list[TurnPosition] = []
    for seq, ev in enumerate(events, start=first_seq):
        action = ev.action
        if action == "user_message":
            current = TurnPosition(current.turn + 1, seq)
            out.append(current)
            continue
        if action == "tool_result" and ev.tool_call_id is not None:
            pos = added.get(ev.tool_call_id) or known.get(ev.tool_call_id)
            out.append(current if pos is None else pos)
            continue
        out.append(current)
        if action == "tool_call_request":
            for call in ev.tool_calls or ():
                added[call.id] = current  # a re-used id: later results join the latest
    return out, added


def stored_calls_needed(events: Sequence[SessionEvent]) -> list[str]:
    """The call ids whose stored positions ``number_turns`` may look up for ``events``:
    those of results with no call with their id earlier in ``events`` (a result after
    its call in the same batch takes the batch's position and never reads ``calls``)."""
    called: set[str] = set()
    needed: list[str] = []
    for ev in events:
        if ev.action == "tool_call_request":
            called.update(call.id for call in ev.tool_calls or ())
        elif ev.action == "tool_result":
            call_id = ev.tool_call_id
            if call_id is not None and call_id not in called:
                needed.append(call_id)
    return needed


def assign_turns(
    events: Sequence[SessionEvent],
    *,
    last_turn: int = 0,
    call_turns: Mapping[str, int] | None = None,
) -> tuple[list[int], dict[str, int]]:
    """Turn numbers for ``events`` appended after a log whose last turn is ``last_turn``
    (``number_turns`` without the seqs).

    ``call_turns`` maps tool call ids already in the log to their turns. Returns the turn
    of each event and the call ids this batch adds (id -> turn).
    """
    calls = {k: TurnPosition(t, 0) for k, t in (call_turns or {}).items()}
    positions, added = number_turns(events, last=TurnPosition(last_turn, 0), calls=calls)
    return [p.turn for p in positions], {k: p.turn for k, p in added.items()}


def group_turns(events: Sequence[SessionEvent]) -> list[Turn]:
    """Group events (oldest first) into turns, in order of turn number."""
    numbers, _ = assign_turns(events)
    turns: dict[int, Turn] = {}
    for ev, n in zip(events, numbers, strict=True):
        turns.setdefault(n, Turn(n, [])).events.append(ev)
    return [turns[n] for n in sorted(turns)]


def _turns(events: Sequence[SessionEvent]) -> list[int]:
    """The turn of each event: the stored ``turn`` when every event has one, otherwise
    the numbering rule applied to ``events`` alone."""
    if all(e.turn is not None for e in events):
        return [e.turn or 0 for e in events]
    return assign_turns(events)[0]


def _pairs(events: Sequence[SessionEvent]) -> list[tuple[int, int]]:
    """(call index, result index) for every result whose call is among ``events``.

    A result pairs with the latest call with its id *before* it; only when there is none,
    with the first call with its id after it in the same turn (a result stored before its
    call). A call with a reused id in a later turn never takes an earlier turn's result,
    so a window that starts between a call and its result is widened instead of giving
    the result to another turn's call.
    """
    return _pair_up(events).pairs


class _Pairing(NamedTuple):
    """What one pass over a run of events finds: its ``_pairs``, the indexes of the
    results that pair with nothing (the orphans ``drop_orphan_results`` leaves out), and
    whether some result had no call with its id before it (only then are turns read)."""

    pairs: list[tuple[int, int]]
    orphans: list[int]
    counted: bool


def _pair_up(events: Sequence[SessionEvent]) -> _Pairing:
    """The ``_Pairing`` of ``events`` (see ``_pairs`` for the rule)."""
    turns: list[int] | None = None
    later: dict[tuple[str, int], int] = {}  # (call id, turn) -> its first call's index
    latest: dict[str, int] = {}
    out: list[tuple[int, int]] = []
    orphans: list[int] = []
    for j, ev in enumerate(events):
        action = ev.action
        if action == "tool_call_request":
            for c in ev.tool_calls or ():
                latest[c.id] = j
        elif action == "tool_result":
            call_id = ev.tool_call_id
            call = None if call_id is None else latest.get(call_id)
            if call is None and call_id is not None:
                if turns is None:
                    turns = _turns(events)
                    for i, e in enumerate(events):
                        if e.action == "tool_call_request":
                            for c in e.tool_calls or ():
                                later.setdefault((c.id, turns[i]), i)
                call = later.get((call_id, turns[j]))
            if call is None:
                orphans.append(j)
            else:
                out.append((call, j))
    return _Pairing(out, orphans, turns is not None)


def splits_tool_pair(events: Sequence[SessionEvent], start: int, end: int | None = None) -> bool:
    """Whether the window ``events[start:end]`` separates a call from one of its results."""
    stop = len(events) if end is None else end
    for call, result in _pairs(events):
        if (start <= call < stop) != (start <= result < stop):
            return True
    return False


def _spans(events: Sequence[SessionEvent]) -> list[tuple[int, int]]:
    """``(lo, hi)`` index spans of every call/result pair, ``lo < hi``."""
    return [(min(c, r), max(c, r)) for c, r in _pairs(events)]


def _cut_starts(spans: list[tuple[int, int]], n: int) -> list[bool]:
    """For each start ``s`` in ``0..n``: whether the window ``[s, n)`` splits a pair.

    It does exactly when some span has ``lo < s <= hi`` (computed with a difference array,
    so one pass instead of one pass per candidate start).
    """
    diff = [0] * (n + 2)
    for lo, hi in spans:
        diff[lo + 1] += 1
        diff[hi + 1] -= 1
    out: list[bool] = []
    depth = 0
    for s in range(n + 1):
        depth += diff[s]
        out.append(depth > 0)
    return out


def safe_cut_points(events: Sequence[SessionEvent]) -> list[bool]:
    """For each index ``i`` in ``0..len(events)``: whether a window starting at ``i``
    (a cut before ``events[i]``) splits no tool call from its results."""
    return [not split for split in _cut_starts(_spans(events), len(events))]


def safe_window_start(events: Sequence[SessionEvent], start: int) -> int:
    """The start index nearest to ``start`` that splits no tool pair.

    ``start`` itself when it splits nothing; otherwise the nearest turn boundary (a
    user message, or 0) that splits nothing and leaves the window non-empty. Ties go to
    the earlier boundary.
    """
    start = max(0, min(start, len(events)))
    if start == 0:
        return start
    return _safe_start(events, start, _pairs(events))


def _safe_start(events: Sequence[SessionEvent], start: int, pairs: list[tuple[int, int]]) -> int:
    """``safe_window_start`` with the ``_pairs`` of ``events`` given (``0 < start``)."""
    n = len(events)
    start = min(start, n)
    # The window [s, n) splits a pair exactly when a span has lo < s <= hi: the depth of
    # the spans over s (a difference array summed once) is the number it splits.
    diff = [0] * (n + 2)
    for call, result in pairs:
        if call < result:
            diff[call + 1] += 1
            diff[result + 1] -= 1
        else:
            diff[result + 1] += 1
            diff[call + 1] -= 1
    depth = list(accumulate(diff))
    if not depth[start]:
        return start
    # The nearest turn boundary (a user message, or 0) that splits nothing, searched
    # outward from ``start``; at equal distance the earlier one (more context rather
    # than less). 0 is at distance ``start``, so the search ends there at the latest.
    for d in range(1, start):
        i = start - d
        if not depth[i] and events[i].action == "user_message":
            return i
        i = start + d
        if i < n and not depth[i] and events[i].action == "user_message":
            return i
    return 0


def _min_hi_covering(spans: list[tuple[int, int]], n: int) -> list[int]:
    """For each ``s`` in ``0..n``: the smallest ``hi`` of the spans with ``lo < s <= hi``
    (``n + 1`` when there is none)."""
    by_lo = sorted(spans)
    heap: list[int] = []
    out: list[int] = []
    k = 0
    for s in range(n + 1):
        while k < len(by_lo) and by_lo[k][0] < s:
            heapq.heappush(heap, by_lo[k][1])
            k += 1
        while heap and heap[0] < s:
            heapq.heappop(heap)
        out.append(heap[0] if heap else n + 1)
    return out


def _max_lo_covering(spans: list[tuple[int, int]], n: int) -> list[int]:
    """For each ``e`` in ``0..n``: the largest ``lo`` of the spans with ``lo < e <= hi``
    (``-1`` when there is none)."""
    by_lo = sorted(spans)
    heap: list[tuple[int, int]] = []  # (-lo, hi)
    out: list[int] = []
    k = 0
    for e in range(n + 1):
        while k < len(by_lo) and by_lo[k][0] < e:
            heapq.heappush(heap, (-by_lo[k][0], by_lo[k][1]))
            k += 1
        while heap and heap[0][1] < e:
            heapq.heappop(heap)
        out.append(-heap[0][0] if heap else -1)
    return out


def safe_window(events: Sequence[SessionEvent], start: int, end: int) -> tuple[int, int]:
    """Bounds nearest to ``[start, end)`` that split no tool pair (a general window).

    The cost of candidate bounds (turn boundaries, 0, ``len(events)``, and the requested
    bounds themselves) is the total distance moved; ties go to the longer window, then to
    the earlier start.
    """
    n = len(events)
    start, end = max(0, min(start, n)), max(0, min(end, n))
    if not splits_tool_pair(events, start, end):
        return start, end
    spans = _spans(events)
    # A non-empty window [s, e) splits a pair exactly when a span has one end inside:
    # lo < s <= hi < e (min_hi[s] < e) or s <= lo < e <= hi (max_lo[e] >= s).
    min_hi = _min_hi_covering(spans, n)
    max_lo = _max_lo_covering(spans, n)
    boundaries = {i for i, ev in enumerate(events) if ev.action == "user_message"} | {0, n}
    starts = sorted(boundaries | {start})
    # Ends in the order that is best for any fixed start: nearest to ``end``, then longer.
    ends = sorted(boundaries | {end}, key=lambda e: (abs(e - end), -e))
    best: tuple[int, int] = (0, n)
    best_cost: tuple[int, int] | None = None
    for s in starts:
        moved = abs(s - start)
        if best_cost is not None and moved > best_cost[0]:
            continue
        for e in ends:
            if best_cost is not None and moved + abs(e - end) > best_cost[0]:
                break
            if e <= s or min_hi[s] < e or max_lo[e] >= s:
                continue
            cost = (moved + abs(e - end), -(e - s))
            if best_cost is None or cost < best_cost:
                best, best_cost = (s, e), cost
            break  # the first valid end is the best one for this start
    return best


def window_last_n(events: Sequence[SessionEvent], n: int) -> list[SessionEvent]:
    """The last ``n`` events, moved to the nearest boundary when the cut splits a pair."""
    if n <= 0:
        return []
    start = safe_window_start(events, max(0, len(events) - n))
    return list(events[start:])


def drop_orphan_results(events: Sequence[SessionEvent]) -> list[SessionEvent]:
    """Events without tool results whose call is not among them.

    Such a result cannot be sent to a provider (every provider rejects it); it stays in
    storage. Used when a loaded window starts after the call it answers.
    """
    return _without(events, _pair_up(events).orphans, 0)


def _without(events: Sequence[SessionEvent], orphans: list[int], start: int) -> list[SessionEvent]:
    """``events[start:]`` without the results at the indexes ``orphans``."""
    dropped = {i for i in orphans if i >= start}
    if not dropped:
        return list(events[start:])
    return [e for i, e in enumerate(events[start:], start) if i not in dropped]


def widening_turns(window: Sequence[SessionEvent]) -> set[int]:
    """The window rule's widening, the only implementation (the store's SQL path and the
    actor's cache both use it).

    A window cut from the end of the log in which every tool result follows its call
    stays as it is (the empty set). Otherwise it is widened back to the opening message
    of the turn of its first event and of every tool result in it (a result's turn is
    its call's, and an earlier call with its id is never before that turn's opening);
    these are the turns returned (turn 0 has no opening message: it starts at the log's
    start).
    """
    # Only a call *before* a result settles it: a result whose call comes after it in
    # its turn may have an earlier call with its id before the cut, the one it answers.
    # (A result is settled exactly when a call with its id precedes it in the window:
    # ``_pairs`` gives it the latest such call. One pass, no turn lookup.)
    calls: set[str] = set()
    for e in window:
        if e.action == "tool_call_request":
            calls.update(c.id for c in e.tool_calls or ())
        elif e.action == "tool_result" and (e.tool_call_id is None or e.tool_call_id not in calls):
            break
    else:
        return set()
    needed = {e.turn or 0 for e in window if e.action == "tool_result"}
    needed.add(window[0].turn or 0)
    return needed


def window_from(loaded: Sequence[SessionEvent], cut: int) -> list[SessionEvent]:
    """The window of ``loaded`` (widened as ``widening_turns`` says) whose nominal start
    is index ``cut``: moved to the nearest start that splits no pair, then without the
    results whose call is still outside."""
    pairs, orphans, counted = _pair_up(loaded)
    start = _safe_start(loaded, cut, pairs) if cut > 0 else 0
    if counted and None in map(_TURN, loaded):
        # Turns counted from the events themselves may differ on the shorter list.
        return drop_orphan_results(loaded[start:])
    # ``start`` splits no pair, so the pairs of ``loaded[start:]`` are those of ``loaded``
    # after it, and its orphans those of ``loaded`` after ``start``: no second pass. (With
    # stored turns, ``_pairs`` of the shorter list finds the same calls; without, when no
    # result of ``loaded`` needed a turn, none of the shorter list does either: a result
    # after ``start`` whose latest call is before ``start`` would be a split pair.)
    return _without(loaded, orphans, start)


def tail_window(
    suffix: Sequence[SessionEvent], limit: int, *, complete: bool
) -> list[SessionEvent] | None:
    """The tool-pair-safe window of the last ``limit`` events, from a suffix of the log.

    ``suffix`` holds every event of the session from some seq on (oldest first, with
    ``turn`` set as the store assigns it); ``complete`` says whether it starts at the
    session's beginning. The window is the store's (``widening_turns``, then
    ``window_from``). Returns ``None`` when ``suffix`` does not reach back far enough to
    decide (the caller reads the store instead).
    """
    n = len(suffix)
    cut = n - limit
    if cut <= 0 and complete:
        return drop_orphan_results(suffix)
    if cut < 0 or not suffix:
        return None  # fewer events than the window, and older ones not at hand
    window = list(suffix[cut:])
    needed = widening_turns(window)
    if not needed:
        return window
    openings = (i for i in range(n - 1, -1, -1) if suffix[i].action == "user_message")
    lower = _widened_start(suffix, cut, needed, openings, 0, complete=complete)
    if lower is None:
        return None
    return window_from(suffix[lower:], cut - lower)


def _widened_start(
    events: Sequence[SessionEvent],
    cut: int,
    needed: set[int],
    openings: Iterable[int],
    offset: int,
    *,
    complete: bool,
) -> int | None:
    """Where ``tail_window`` widens the window of ``events`` cut at ``cut`` to: the
    opening message of each turn in ``needed`` (``openings``: the indexes of the user
    messages plus ``offset``, the last first), or ``cut`` when it is lower; ``None`` when
    an opening is not in ``events`` (turn 0 opens at 0 when ``complete``)."""
    # Turn numbers grow with each user message, so walk back from the end only until
    # every needed turn's opening message is found or passed.
    starts: dict[int, int] = {}
    lowest = min(needed)
    for p in openings:
        i = p - offset
        turn = events[i].turn or 0
        if turn in needed:
            starts[turn] = i
        if turn <= lowest:
            break
    missing = needed.difference(starts)
    if missing:
        if not complete or missing != {0}:
            return None
        return 0  # turn 0: everything before the first user message
    return min(cut, *map(starts.__getitem__, needed))
