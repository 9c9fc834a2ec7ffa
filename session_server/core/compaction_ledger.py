"""``CompactionLedger``: one agent's compaction bookkeeping (pure): which sessions have
a compaction turn running (one at a time per session), and which automatic summaries
would gain nothing, why (each reason reported once per session) and up to which turn.

A collaborator of ``AgentCore``: its pressure check and its plan after a compaction
write here, its compaction turns begin and end here.
"""

from __future__ import annotations

__all__ = ["CompactionLedger"]


class CompactionLedger:
    """Compactions running and futile summaries, per session (see the module docstring)."""

    def __init__(self) -> None:
        self._compacting: set[str] = set()
        # Sessions whose last automatic summary gained nothing (the reason), those whose
        # reason was reported, and the last turn when a summary gained nothing.
        self._futile: dict[str, str] = {}
        self._futile_noted: set[tuple[str, str]] = set()
        self._futile_turn: dict[str, int] = {}

    # -- compaction turns -----------------------------------------------------------------------

    def begin(self, session_id: str) -> bool:
        """Mark a compaction of ``session_id`` as running; ``False`` when one already is."""
        if session_id in self._compacting:
            return False
        self._compacting.add(session_id)
        return True

    def end(self, session_id: str) -> None:
        self._compacting.discard(session_id)

    # -- summaries that gain nothing ------------------------------------------------------------

    def futile(self, session_id: str, reason: str, turn: int | None = None) -> None:
        """An automatic summary of ``session_id`` would gain nothing, for ``reason``;
        ``turn``: the highest turn it was planned over (no new attempt up to it)."""
        self._futile[session_id] = reason
        if turn is not None:
            self._futile_turn[session_id] = turn

    def futile_turn(self, session_id: str) -> int | None:
        """The highest turn of the last summary that gained nothing (``None``: none)."""
        return self._futile_turn.get(session_id)

    def clear_futile(self, session_id: str) -> None:
        """A summary of ``session_id`` may gain again (a turn under pressure gave it
        something, or the session was deleted)."""
        self._futile.pop(session_id, None)
        self._futile_turn.pop(session_id, None)

    def note(self, session_id: str) -> str | None:
        """Why an automatic compaction of ``session_id`` would gain nothing, the first
        time that reason is asked for (each reason is reported once per session)."""
        reason = self._futile.get(session_id)
        if reason is None or (session_id, reason) in self._futile_noted:
            return None
        self._futile_noted.add((session_id, reason))
        return reason
