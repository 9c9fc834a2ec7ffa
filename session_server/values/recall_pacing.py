"""How the background backfill of the recall index paces itself (pure).

A backfill step is one write transaction of the agent (its own writes wait for it) that
indexes some events on a worker thread: FTS5's tokenising and segment writes take a core
and the disk while it runs. A step indexes at most ``STEP_ROWS`` events and
``STEP_CHARS`` of text, and after each step the backfill rests as long as the step took
(``rest``): it takes at most about half of a core and of the disk from the other
agents' calls, and the agent's own writes wait at most one short step.
"""

from __future__ import annotations

from typing import Final

__all__ = ["MAX_REST_S", "STEP_CHARS", "STEP_ROWS", "rest"]

STEP_ROWS: Final = 64
STEP_CHARS: Final = 64 * 1024
MAX_REST_S: Final = 0.25


def rest(elapsed_s: float) -> float:
    """How long to rest after a step that took ``elapsed_s``: as long (a duty cycle of
    one half), at most ``MAX_REST_S``."""
    return max(0.0, min(MAX_REST_S, elapsed_s))
