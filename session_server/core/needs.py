"""What ``AgentCore`` may need first, and what one request's reads returned (pure).

A ``Need`` names a read the actor runs before asking the core again (``NeedState``,
``NeedAgentStrategy``, ``NeedWindow``, ``NeedSnapshot``, ``NeedCount``,
``NeedBlocks``); its answer goes
into the request's ``Known`` (``AgentCore.learn``). ``known_state``/``existing_state``
read a session's state from ``Known``, or name the read that gets it.
"""

from __future__ import annotations

import msgspec

from ..mirror.snapshot import RestoredSnapshot
from ..values.errors import NotFoundError
from ..values.plans import ContextWindow, SessionState
from ..values.recent import SessionView

__all__ = [
    "Known",
    "Need",
    "NeedAgentStrategy",
    "NeedBlocks",
    "NeedCount",
    "NeedSnapshot",
    "NeedState",
    "NeedWindow",
    "existing_state",
    "known_state",
]


class Need(msgspec.Struct, frozen=True):
    """A read the actor runs before asking the core again."""


class NeedState(Need, frozen=True):
    """The session's state row (``store.session_state``)."""

    session_id: str


class NeedAgentStrategy(Need, frozen=True):
    """The agent's stored strategy (``store.get_setting(AGENT_STRATEGY_KEY)``)."""

    generation: int


class NeedBlocks(Need, frozen=True):
    """The agent's current memory blocks and the session's (``block_sql.current_blocks``),
    asked at the block cache's ``generation``."""

    session_id: str
    generation: int


class NeedWindow(Need, frozen=True):
    """A context window (``store.context_window(limit, from_record=True)``); ``limit``
    ``None`` reads everything from the record's lower bound (not cached)."""

    session_id: str
    limit: int | None
    version: int


class NeedSnapshot(Need, frozen=True):
    """The session's snapshot file, if it is valid, taken at ``last_seq`` and its bytes
    have the SHA-256 ``digest`` SQLite recorded for it (else ``None``: rebuild)."""

    session_id: str
    last_seq: int
    digest: str


class NeedCount(Need, frozen=True):
    """How many non-compaction events have ``from_seq <= seq < before_seq``
    (``store.count_events``): the events a bounded window leaves out."""

    session_id: str
    from_seq: int
    before_seq: int


class Known:
    """What the reads of one request returned (its scratch space; one per request)."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, int, int], int] = {}
        self.states: dict[str, SessionState | None] = {}
        self.views: dict[tuple[str, int], SessionView] = {}
        self.full: dict[str, ContextWindow] = {}
        self.snapshots: dict[str, RestoredSnapshot | None] = {}
        self.compacted = False
        # The token counts of the turn being planned, once a pressure check counted them.
        self.tokens: list[int] | None = None
        # The core's count of strategy changes when this request asked for a session
        # row (``AgentCore.stored_strategy``): -1 before it asked.
        self.strategy_epoch = -1

    def forget_views(self, session_id: str) -> None:
        """Drop the windows read for ``session_id`` (a commit since made them stale)."""
        self.views = {k: v for k, v in self.views.items() if k[0] != session_id}
        self.full.pop(session_id, None)


def known_state(known: Known, session_id: str) -> SessionState | NeedState | None:
    """The session's state as read (``None``: no such session), or the read to run."""
    if session_id not in known.states:
        return NeedState(session_id)
    return known.states[session_id]


def existing_state(known: Known, session_id: str) -> SessionState | NeedState:
    """The session's state; ``NotFoundError`` when the session does not exist."""
    state = known_state(known, session_id)
    if state is None:
        raise NotFoundError.session(session_id)
    return state
