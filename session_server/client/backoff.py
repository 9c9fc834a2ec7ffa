"""The clients' reconnection schedule (pure: no clock, no sleep, no randomness of its own).

A client that cannot reach its server waits before the next attempt: exponential
backoff with jitter, within a time budget. ``Backoff.delay(attempt, u)`` is the wait after
the ``attempt``-th failed attempt (0-based) given a uniform draw ``u`` in ``[0, 1)``;
``Backoff.wait(attempt, elapsed, u)`` is that wait cut to what is left of the budget, or
``None`` once the budget is spent. The caller supplies the clock and the draw, so the
schedule is tested without either.
"""

from __future__ import annotations

import math

import msgspec

__all__ = ["Backoff"]


class Backoff(msgspec.Struct, frozen=True):
    """Exponential backoff with jitter within ``budget`` seconds.

    The ``n``-th wait (``n`` from 0) is drawn from ``[cap * (1 - jitter), cap]`` where
    ``cap = min(max_delay, initial * factor ** n)``: the jitter spreads clients that lost
    the same server so they do not return in step, and the lower bound keeps each wait
    from collapsing to nothing. ``budget`` bounds the whole outage: no wait ends past it.
    ``min_delay`` (a server's ``Retry-After``, say) raises a wait, within the budget.
    """

    budget: float = 30.0
    initial: float = 0.05
    max_delay: float = 2.0
    factor: float = 2.0
    jitter: float = 0.5

    def __post_init__(self) -> None:
        for name in ("budget", "initial", "max_delay"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name}: must be a finite number >= 0, not {value!r}")
        if not (math.isfinite(self.factor) and self.factor >= 1):
            raise ValueError(f"factor: must be a finite number >= 1, not {self.factor!r}")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter: must be between 0 and 1, not {self.jitter!r}")

    def delay(self, attempt: int, u: float) -> float:
        """The wait after failed attempt ``attempt`` (0-based), for a draw ``u`` in [0, 1)."""
        exponent = min(attempt, 64)  # past this the cap is max_delay anyway
        cap = min(self.max_delay, self.initial * self.factor**exponent)
        return cap * (1.0 - self.jitter * u)

    def wait(
        self, attempt: int, elapsed: float, u: float, *, min_delay: float = 0.0
    ) -> float | None:
        """The wait before attempt ``attempt + 1`` when ``elapsed`` seconds of the budget
        are spent; ``None`` when nothing is left (give up). A wait never ends past the
        budget: the last one is cut so a final attempt is made at its end."""
        left = self.budget - elapsed
        if left <= 0:
            return None
        return min(max(self.delay(attempt, u), min_delay), left)
