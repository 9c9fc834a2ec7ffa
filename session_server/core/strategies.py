"""``KnownStrategies``: what one agent's core knows of the stored compaction strategies
(pure): the server's default, the agent's default as last read or written (with a
generation, so that a read older than a write is not taken), and the strategies of
sessions that the recent cache does not hold (least recently used first, with an epoch,
so that a read older than a change is not remembered).

A collaborator of ``AgentCore``, which asks it for the precedence (``resolve``) and
tells it what was read, written, deleted and closed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from ..compaction.config import StrategyConfig, resolve_strategy
from .decisions import StrategyWrite
from .needs import NeedAgentStrategy

__all__ = ["AGENT_STRATEGY_KEY", "MAX_KNOWN_STRATEGIES", "KnownStrategies"]

AGENT_STRATEGY_KEY: Final = "strategy"
"""The settings key of the agent's default strategy in its SQLite file."""

MAX_KNOWN_STRATEGIES: Final = 256
"""Sessions whose strategy an agent's core remembers beside its recent cache (see
``AgentCore.stored_strategy``)."""

_DEFAULT_CONFIG: Final = StrategyConfig()


class KnownStrategies:
    """The strategy levels one agent's core knows (see the module docstring). No I/O."""

    def __init__(self, server: dict[str, Any] | None) -> None:
        self.server = server
        self._agent: dict[str, Any] | None = None
        self._agent_loaded = False
        self._agent_generation = 0
        # The persisted strategy of sessions known to exist that the recent cache does not
        # hold (a client that persists without building through the server): a persist
        # then reads no session row to find it. Least recently used first, at most
        # ``MAX_KNOWN_STRATEGIES``; dropped with the session, on hibernation, and kept
        # current by ``written``. ``epoch`` counts the changes, so a read issued before
        # one is not remembered.
        self._sessions: OrderedDict[str, dict[str, Any] | None] = OrderedDict()
        self.epoch = 0

    # -- the agent's default ------------------------------------------------------------------

    @property
    def agent_known(self) -> dict[str, Any] | None:
        """The agent's default as last read or written (``None`` also before a read)."""
        return self._agent

    def agent(self) -> dict[str, Any] | NeedAgentStrategy | None:
        """The agent's default, or the read of it to run first."""
        if not self._agent_loaded:
            return NeedAgentStrategy(self._agent_generation)
        return self._agent

    def agent_read(self, need: NeedAgentStrategy, stored: bytes | str | None) -> None:
        """The answer to ``need`` (the stored JSON); a strategy set meanwhile (a newer
        generation) wins over this older read."""
        if need.generation == self._agent_generation:
            self._agent = None if stored is None else msgspec.json.decode(stored)
            self._agent_loaded = True

    def resolve(
        self, session: Mapping[str, Any] | None, request: Mapping[str, Any] | None
    ) -> StrategyConfig | NeedAgentStrategy:
        """Precedence: request > session (persisted) > agent default > server default."""
        agent = self.agent()
        if isinstance(agent, NeedAgentStrategy):
            return agent
        server = self.server
        if server is None and agent is None and not session and not request:
            return _DEFAULT_CONFIG  # the common case: no validation to redo on every build
        return resolve_strategy(server, agent, session, request)

    # -- sessions the recent cache does not hold ----------------------------------------------

    def session(self, session_id: str) -> tuple[bool, dict[str, Any] | None]:
        """``(True, strategy)`` when the session's strategy is remembered (it becomes the
        most recently used), else ``(False, None)``."""
        if session_id in self._sessions:
            self._sessions.move_to_end(session_id)
            return True, self._sessions[session_id]
        return False, None

    def remember(self, session_id: str, strategy: dict[str, Any] | None, epoch: int) -> None:
        """Remember the strategy read from the session's row, unless a change (a write, a
        delete, a close) came since the read was issued at ``epoch``."""
        if epoch != self.epoch:
            return
        self._sessions[session_id] = strategy
        if len(self._sessions) > MAX_KNOWN_STRATEGIES:
            self._sessions.popitem(last=False)

    # -- changes --------------------------------------------------------------------------------

    def written(self, write: StrategyWrite) -> None:
        """A ``StrategyWrite`` committed (called under the write lock)."""
        if write.session_id is None:
            self._agent, self._agent_loaded = write.values, True
            self._agent_generation += 1
        else:
            self.epoch += 1
            if write.session_id in self._sessions:
                self._sessions[write.session_id] = write.values

    def forget(self, session_id: str | None = None) -> None:
        """Drop what is remembered of ``session_id``'s strategy (``None``: of every
        session): it was deleted, or the store closed."""
        self.epoch += 1
        if session_id is None:
            self._sessions.clear()
        else:
            self._sessions.pop(session_id, None)

    def hibernated(self) -> None:
        """The store closed: every stored level is read again when it opens."""
        self.forget()
        self._agent_loaded = False
        self._agent_generation = 0
