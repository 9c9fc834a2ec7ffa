"""File-descriptor budget of the process (I/O shell).

An open agent holds about six descriptors (the SQLite writer's database, WAL and shared
memory files, the reader's database and WAL, the ``agent.lock``) plus one or two while
its mirror appends; a WebSocket connection holds one. The server's defaults are derived
from ``RLIMIT_NOFILE`` so that open agents and connections together can never exhaust it:

- ``raise_nofile_limit()`` raises the soft limit to the hard limit (allowed without
  privileges) once at start;
- ``derive_limits(soft)`` keeps ``FD_RESERVE`` descriptors for the process itself, gives
  open agents at most half of the rest (``FDS_PER_AGENT`` each, at most 256 agents) and
  connections what remains (at most ``MAX_DEFAULT_CONNECTIONS``);
- ``out_of_descriptors(exc)`` tells whether an error means the process ran out
  (``EMFILE``/``ENFILE``), so it is answered as a retryable error with a true message
  rather than "database file is unusable".
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import sqlite3
from dataclasses import dataclass
from typing import Final

from ..values.errors import UnavailableError

__all__ = [
    "FDS_PER_AGENT",
    "FD_RESERVE",
    "MAX_DEFAULT_CONNECTIONS",
    "MAX_DEFAULT_OPEN_AGENTS",
    "DescriptorLimits",
    "derive_limits",
    "descriptor_error",
    "nofile_soft_limit",
    "out_of_descriptors",
    "raise_nofile_limit",
]

FDS_PER_AGENT: Final = 8
FD_RESERVE: Final = 64
MAX_DEFAULT_OPEN_AGENTS: Final = 256
MAX_DEFAULT_CONNECTIONS: Final = 1024


@dataclass(frozen=True, slots=True)
class DescriptorLimits:
    """Bounds derived from a descriptor limit: they add up to less than ``nofile``."""

    nofile: int
    max_open_agents: int
    max_connections: int


def nofile_soft_limit() -> int:
    """The current soft ``RLIMIT_NOFILE`` (a large number when unlimited)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def raise_nofile_limit() -> int:
    """Raise the soft descriptor limit to the hard limit when allowed; return the soft limit
    now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != soft and (hard == resource.RLIM_INFINITY or hard > soft):
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        with contextlib.suppress(ValueError, OSError):  # some systems cap below hard
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return nofile_soft_limit()


def derive_limits(nofile: int | None = None) -> DescriptorLimits:
    """Default bounds for a process whose descriptor limit is ``nofile`` (default: the
    current soft limit)."""
    limit = nofile_soft_limit() if nofile is None else nofile
    available = max(limit - FD_RESERVE, 2 * FDS_PER_AGENT)
    agents = max(1, min(MAX_DEFAULT_OPEN_AGENTS, available // 2 // FDS_PER_AGENT))
    connections = max(1, min(MAX_DEFAULT_CONNECTIONS, available - agents * FDS_PER_AGENT))
    return DescriptorLimits(limit, agents, connections)


def out_of_descriptors(exc: BaseException) -> bool:
    """True when ``exc`` (an ``OSError`` or SQLite's "unable to open database file") comes
    from the process or system running out of file descriptors."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.EMFILE, errno.ENFILE)
    if isinstance(exc, sqlite3.OperationalError) and "unable to open" in str(exc):
        # SQLite hides errno; probe whether one more descriptor can be had right now.
        try:
            fd = os.open(os.devnull, os.O_RDONLY)
        except OSError as probe:
            return probe.errno in (errno.EMFILE, errno.ENFILE)
        os.close(fd)
    return False


def descriptor_error(agent_id: str) -> UnavailableError:
    """The retryable error for an agent that cannot be opened for lack of descriptors."""
    return UnavailableError(
        f"agent {agent_id!r}: the server has no free file descriptor to open its store "
        f"right now (RLIMIT_NOFILE {nofile_soft_limit()}); retry later",
        data={"agent_id": agent_id, "reason": "too_many_open_files", "retryable": True},
    )
