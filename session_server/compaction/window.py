"""Turn numbers and turn starts of a loaded window of events (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from ..events import SessionEvent
from ..turns import assign_turns

__all__ = ["event_turns", "safe_cuts", "user_turn_starts"]


def event_turns(events: Sequence[SessionEvent], *, last_turn: int = 0) -> list[int]:
    """The turn of each event: the stored ``turn`` when every event has one, else computed.

    Computed turns (``session_server.turns.assign_turns``) continue after ``last_turn``,
    for a window that starts just before turn ``last_turn + 1``.
    """
    if all(e.turn is not None for e in events):
        return [e.turn for e in events if e.turn is not None]
    numbers, _ = assign_turns(events, last_turn=last_turn)
    return numbers


def user_turn_starts(events: Sequence[SessionEvent], turns: Sequence[int]) -> list[tuple[int, int]]:
    """``(turn, index)`` of every user message (each starts a turn), oldest first."""
    return [
        (t, i)
        for i, (e, t) in enumerate(zip(events, turns, strict=True))
        if e.action == "user_message"
    ]


def safe_cuts(events: Sequence[SessionEvent]) -> list[bool]:
    """For each index ``i``, whether cutting before ``events[i]`` splits no tool pair.

    Linear time: a call at index ``c`` answered at ``r > c`` forbids cuts in ``(c, r]``.
    """
    n = len(events)
    calls: dict[str, int] = {}
    for i, ev in enumerate(events):
        if ev.action == "tool_call_request":
            for call in ev.tool_calls or ():
                calls.setdefault(call.id, i)
    diff = [0] * (n + 2)
    for r, ev in enumerate(events):
        if ev.action == "tool_result" and ev.tool_call_id in calls:
            c = calls[ev.tool_call_id]
            lo, hi = min(c, r), max(c, r)
            if lo < hi:
                diff[lo + 1] += 1
                diff[hi + 1] -= 1
    out: list[bool] = []
    depth = 0
    for i in range(n + 1):
        depth += diff[i]
        out.append(depth == 0)
    return out
