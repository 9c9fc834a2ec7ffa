"""Turn grouping and tool-pair-safe windows (pure).

A turn starts at a ``user_message``; every later event belongs to it until the next user
message, except that a ``tool_result`` belongs to the turn of its call (matched by
``tool_call_id``) even when it arrives after the next user message. Events before the
first user message form turn 0.

A window never separates a tool call from its results: a cut that would leave a result
without its call (or a call without its results) moves to the nearest turn boundary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from .events import SessionEvent

__all__ = [
    "Turn",
    "assign_turns",
    "drop_orphan_results",
    "group_turns",
    "safe_window",
    "safe_window_start",
    "splits_tool_pair",
    "window_last_n",
]


class Turn(msgspec.Struct):
    number: int
    events: list[SessionEvent]


def assign_turns(
    events: Sequence[SessionEvent],
    *,
    last_turn: int = 0,
    call_turns: Mapping[str, int] | None = None,
) -> tuple[list[int], dict[str, int]]:
    """Turn numbers for ``events`` appended after a log whose last turn is ``last_turn``.

    ``call_turns`` maps tool call ids already in the log to their turns. Returns the turn
    of each event and the call ids this batch adds (id -> turn).
    """
    known = dict(call_turns or {})
    added: dict[str, int] = {}
    turn = last_turn
    out: list[int] = []
    for ev in events:
        if ev.action == "user_message":
            turn += 1
            out.append(turn)
        elif ev.action == "tool_result" and ev.tool_call_id in known:
            out.append(known[ev.tool_call_id])
        else:
            out.append(turn)
        if ev.action == "tool_call_request":
            for call in ev.tool_calls or ():
                known[call.id] = turn
                added[call.id] = turn
    return out, added


def group_turns(events: Sequence[SessionEvent]) -> list[Turn]:
    """Group events (oldest first) into turns, in order of turn number."""
    numbers, _ = assign_turns(events)
    turns: dict[int, Turn] = {}
    for ev, n in zip(events, numbers, strict=True):
        turns.setdefault(n, Turn(n, [])).events.append(ev)
    return [turns[n] for n in sorted(turns)]


def _call_index(events: Sequence[SessionEvent]) -> dict[str, int]:
    index: dict[str, int] = {}
    for i, ev in enumerate(events):
        if ev.action == "tool_call_request":
            for call in ev.tool_calls or ():
                index.setdefault(call.id, i)
    return index


def _pairs(events: Sequence[SessionEvent]) -> list[tuple[int, int]]:
    """(call index, result index) for every result whose call is among ``events``."""
    calls = _call_index(events)
    out = []
    for j, ev in enumerate(events):
        if ev.action == "tool_result" and ev.tool_call_id in calls:
            out.append((calls[ev.tool_call_id], j))
    return out


def splits_tool_pair(events: Sequence[SessionEvent], start: int, end: int | None = None) -> bool:
    """Whether the window ``events[start:end]`` separates a call from one of its results."""
    stop = len(events) if end is None else end
    for call, result in _pairs(events):
        if (start <= call < stop) != (start <= result < stop):
            return True
    return False


def _nearest(candidates: list[int], target: int) -> int:
    # Ties go to the earlier boundary: more context rather than less.
    return min(candidates, key=lambda c: (abs(c - target), c))


def safe_window_start(events: Sequence[SessionEvent], start: int) -> int:
    """The start index nearest to ``start`` that splits no tool pair.

    ``start`` itself when it splits nothing; otherwise the nearest turn boundary (a
    user message, or 0) that splits nothing and leaves the window non-empty.
    """
    n = len(events)
    start = max(0, min(start, n))
    if start == 0 or not splits_tool_pair(events, start):
        return start
    candidates = [
        i
        for i, ev in enumerate(events)
        if ev.action == "user_message" and i < n and not splits_tool_pair(events, i)
    ]
    candidates.append(0)
    return _nearest(candidates, start)


def safe_window(events: Sequence[SessionEvent], start: int, end: int) -> tuple[int, int]:
    """Bounds nearest to ``[start, end)`` that split no tool pair (a general window)."""
    n = len(events)
    start, end = max(0, min(start, n)), max(0, min(end, n))
    if not splits_tool_pair(events, start, end):
        return start, end
    boundaries = [i for i, ev in enumerate(events) if ev.action == "user_message"] + [0, n]
    best: tuple[int, int] = (0, n)
    best_cost: tuple[int, int] | None = None
    for s in sorted(set(boundaries) | {start}):
        for e in sorted(set(boundaries) | {end}):
            if e <= s or splits_tool_pair(events, s, e):
                continue
            cost = (abs(s - start) + abs(e - end), -(e - s))
            if best_cost is None or cost < best_cost:
                best, best_cost = (s, e), cost
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
    calls = _call_index(events)
    return [e for e in events if e.action != "tool_result" or e.tool_call_id in calls]
