"""Turn numbers and turn starts of a loaded window of events (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..values.events import SessionEvent
from ..values.turns import assign_turns, safe_cut_points

__all__ = ["event_turns", "safe_cuts", "uncompacted_turns", "user_turn_starts"]


def event_turns(events: Sequence[SessionEvent], *, last_turn: int = 0) -> list[int]:
    """The turn of each event: the stored ``turn`` when every event has one, else computed.

    Computed turns (``session_server.values.turns.assign_turns``) continue after ``last_turn``,
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
    """For each index ``i``, whether cutting before ``events[i]`` splits no tool pair."""
    return safe_cut_points(events)


def uncompacted_turns(
    events: Sequence[SessionEvent], memory: Mapping[str, Any] | None
) -> tuple[list[SessionEvent], list[int], list[tuple[int, int]]]:
    """The events a new compaction may cover, their turns, and the user-turn starts
    ``(turn, index)``.

    Compaction events never count; with a summarize ``memory`` only the events from its
    ``tail_start_seq`` on (the earlier turns are summarised already).
    """
    evs = [e for e in events if e.action != "compaction"]
    last_turn = 0
    if memory is not None:
        evs = [e for e in evs if e.seq >= memory["tail_start_seq"]]
        last_turn = memory["tail_start_turn"] - 1
    turns = event_turns(evs, last_turn=last_turn)
    return evs, turns, user_turn_starts(evs, turns)
