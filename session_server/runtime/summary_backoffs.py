"""``SummaryBackoffs``: when each session's failed summary may be tried again (I/O shell).

A background summary that fails (the summarizer down, a timeout) is not tried again for
``base`` seconds, doubling after each failure in a row, at most ``SUMMARY_BACKOFF_MAX``.
The registry keeps these, keyed by agent and session, not the actor: an actor leaves
memory when it hibernates, and one that kept them would forget them then, so that every
reactivated agent would hit a summarizer that is down at once again.

Bounded: at most ``max_entries`` sessions are remembered (the longest since its last
failure goes first); a session forgotten that way may be tried at once, as after a
success. One event loop: no locking.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

__all__ = ["DEFAULT_MAX_BACKOFFS", "SUMMARY_BACKOFF_MAX", "SummaryBackoffs"]

SUMMARY_BACKOFF_MAX: Final = 300.0
"""The longest wait between two attempts at a failing summary."""

DEFAULT_MAX_BACKOFFS: Final = 4096
"""Sessions whose backoff a registry remembers (about 200 bytes each)."""


class SummaryBackoffs:
    """``(retry time, failures in a row)`` per ``(agent_id, session_id)``."""

    def __init__(
        self,
        base: float,
        *,
        max_entries: int = DEFAULT_MAX_BACKOFFS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries: must be at least 1")
        self.base = base
        self.max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[tuple[str, str], tuple[float, int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def backing_off(self, agent_id: str, session_id: str) -> bool:
        """Whether the session's summary failed and its retry time has not come yet."""
        entry = self._entries.get((agent_id, session_id))
        return entry is not None and self._clock() < entry[0]

    def failed(self, agent_id: str, session_id: str) -> float:
        """A summary failed: the seconds before the next attempt (doubling each time)."""
        key = (agent_id, session_id)
        failures = self._entries.pop(key, (0.0, 0))[1]
        delay = min(SUMMARY_BACKOFF_MAX, self.base * 2.0**failures)
        self._entries[key] = (self._clock() + delay, failures + 1)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        return delay

    def succeeded(self, agent_id: str, session_id: str) -> None:
        """A summary ended (written or nothing to write): no backoff any more."""
        self._entries.pop((agent_id, session_id), None)
