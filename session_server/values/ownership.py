"""Who serves an agent: the seam between the cluster (which decides ownership) and the
server's front door (which forwards a call to the owner).

Single-node servers have no directory (every agent is served here). In cluster mode the
cluster's directory answers ``locate``: ``None`` when this node serves the agent (it owns
it, or has just claimed it), else where the owner is. The front door forwards the call,
batch or subscription to ``OwnerLocation.url``; when the owner is gone or answers
``NotOwnerError``, it calls ``forget`` and asks again.
"""

from __future__ import annotations

from typing import Protocol

import msgspec

__all__ = ["OwnerDirectory", "OwnerLocation"]


class OwnerLocation(msgspec.Struct, frozen=True):
    """The node that owns an agent: its id, its advertised WebSocket URL (the server's
    base URL, ``ws://host:port``) and the ownership generation it holds."""

    node_id: str
    url: str
    generation: int


class OwnerDirectory(Protocol):
    """Where an agent is served. Implemented by the cluster; consulted by the server."""

    async def locate(self, agent_id: str) -> OwnerLocation | None:
        """``None``: serve the agent on this node. Otherwise the owner to forward to."""
        ...

    def forget(self, agent_id: str) -> None:
        """A forwarded call found ``agent_id``'s owner gone or not the owner: drop what is
        known of it so that the next ``locate`` looks again (and may claim it here)."""
        ...
