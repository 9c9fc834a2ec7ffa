"""The window rule as it was before it was made faster: the oracle the property tests
compare ``values.turns`` (and the recent cache's windows) against.

These are the functions of ``session_server/values/turns.py`` at bb73a46, unchanged but
for their names' module; they are kept here, not in the package, so the package has one
implementation and the tests keep the old one to prove the new one gives the same
windows.
"""

from __future__ import annotations

from collections.abc import Sequence

from session_server.values.events import SessionEvent
from session_server.values.turns import assign_turns

__all__ = [
    "drop_orphan_results",
    "safe_window_start",
    "tail_window",
    "widening_turns",
    "window_from",
]


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
    turns: list[int] | None = None
    later: dict[tuple[str, int], int] = {}  # (call id, turn) -> its first call's index
    latest: dict[str, int] = {}
    out = []
    for j, ev in enumerate(events):
        if ev.action == "tool_call_request":
            for c in ev.tool_calls or ():
                latest[c.id] = j
        elif ev.action == "tool_result" and ev.tool_call_id is not None:
            call = latest.get(ev.tool_call_id)
            if call is None:
                if turns is None:
                    turns = _turns(events)
                    for i, e in enumerate(events):
                        if e.action == "tool_call_request":
                            for c in e.tool_calls or ():
                                later.setdefault((c.id, turns[i]), i)
                call = later.get((ev.tool_call_id, turns[j]))
            if call is not None:
                out.append((call, j))
    return out


def _answered(events: Sequence[SessionEvent]) -> set[int]:
    """Indexes of the results in ``events`` whose call is among them (see ``_pairs``)."""
    return {result for _, result in _pairs(events)}


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


def _nearest(candidates: list[int], target: int) -> int:
    # Ties go to the earlier boundary: more context rather than less.
    return min(candidates, key=lambda c: (abs(c - target), c))


def _safe_start(events: Sequence[SessionEvent], start: int, pairs: list[tuple[int, int]]) -> int:
    """``safe_window_start`` with the ``_pairs`` of ``events`` given (``0 < start``)."""
    n = len(events)
    start = min(start, n)
    cut = _cut_starts([(min(c, r), max(c, r)) for c, r in pairs], n)
    if not cut[start]:
        return start
    candidates = [i for i, ev in enumerate(events) if ev.action == "user_message" and not cut[i]]
    candidates.append(0)
    return _nearest(candidates, start)


def drop_orphan_results(events: Sequence[SessionEvent]) -> list[SessionEvent]:
    """Events without tool results whose call is not among them.

    Such a result cannot be sent to a provider (every provider rejects it); it stays in
    storage. Used when a loaded window starts after the call it answers.
    """
    answered = _answered(events)
    return [e for i, e in enumerate(events) if e.action != "tool_result" or i in answered]


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
    needed = {window[0].turn or 0}
    needed.update(e.turn or 0 for e in window if e.action == "tool_result")
    return needed


def window_from(loaded: Sequence[SessionEvent], cut: int) -> list[SessionEvent]:
    """The window of ``loaded`` (widened as ``widening_turns`` says) whose nominal start
    is index ``cut``: moved to the nearest start that splits no pair, then without the
    results whose call is still outside."""
    pairs = _pairs(loaded)
    start = _safe_start(loaded, cut, pairs) if cut > 0 else 0
    if any(e.turn is None for e in loaded):
        # Turns counted from the events themselves may differ on the shorter list.
        return drop_orphan_results(loaded[start:])
    # ``start`` splits no pair, so the pairs of ``loaded[start:]`` are those of ``loaded``
    # after it (with stored turns, ``_pairs`` of the shorter list finds the same calls):
    # one pass fewer than ``drop_orphan_results``.
    answered = {result for _, result in pairs if result >= start}
    return [
        e for i, e in enumerate(loaded[start:], start) if e.action != "tool_result" or i in answered
    ]


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
    window = suffix[cut:]
    needed = widening_turns(window)
    if not needed:
        return list(window)
    # Turn numbers grow with each user message, so walk back from the end only until
    # every needed turn's opening message is found or passed.
    starts: dict[int, int] = {}
    lowest = min(needed)
    for i in range(n - 1, -1, -1):
        ev = suffix[i]
        if ev.action != "user_message":
            continue
        turn = ev.turn or 0
        if turn in needed:
            starts[turn] = i
        if turn <= lowest:
            break
    lower = cut
    for turn in needed:
        if turn in starts:
            lower = min(lower, starts[turn])
        elif complete and turn == 0:
            lower = 0  # turn 0: everything before the first user message
        else:
            return None
    return window_from(suffix[lower:], cut - lower)


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
