"""Warnings that repeat under load, logged once per interval with a count.

``RateLimitedLog`` is how the server reports refused connections (``max_connections``);
``quiet_accept_errors`` installs a loop exception handler that does the same for
asyncio's EMFILE-at-accept errors, which would otherwise log a traceback per attempt.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

__all__ = ["RateLimitedLog", "quiet_accept_errors"]

# The server's one logger name, whichever module logs: operators filter on it.
log = logging.getLogger("session_server.server")


class RateLimitedLog:
    """One warning per ``interval`` seconds for a repeated event, with a count."""

    def __init__(self, template: str, interval: float = 10.0) -> None:
        self.template = template
        self.interval = interval
        self.count = 0
        self.last = -float("inf")

    def note(self, *args: Any) -> None:
        self.count += 1
        now = time.monotonic()
        if now - self.last >= self.interval:
            log.warning(self.template, *args, self.count, self.interval)
            self.last = now
            self.count = 0


_accept_errors = RateLimitedLog(
    "cannot accept connections: %s (the process is out of file descriptors?); "
    "%d such errors in the last %.0f s"
)


def quiet_accept_errors(loop: asyncio.AbstractEventLoop) -> None:
    """Log asyncio's "socket.accept() out of system resource" (EMFILE at accept) as one
    line per interval, without a traceback; every other loop error as before."""

    def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if str(context.get("message", "")).startswith("socket.accept() out of system"):
            _accept_errors.note(repr(context.get("exception")))
            return
        loop.default_exception_handler(context)

    loop.set_exception_handler(handler)
