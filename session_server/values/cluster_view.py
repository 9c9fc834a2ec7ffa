"""What the RPC layer and ``/healthz`` read of cluster mode (pure: a protocol).

``runtime.cluster_node.ClusterNode`` is the one implementation; it is the registry's
``turn_logs`` in cluster mode. Handlers check for it with ``isinstance`` (the protocol is
runtime-checkable), so no module outside cluster mode imports NATS.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from .ownership import OwnerLocation

__all__ = ["ClusterMember"]


@runtime_checkable
class ClusterMember(Protocol):
    """A node of a cluster, as ``cluster.status``, ``cluster.owner`` and ``/healthz``
    report it."""

    node_id: str
    url: str
    failovers: int
    rebuilds: int
    fenced_refusals: int

    @property
    def owned_agents(self) -> int: ...

    async def nodes(self) -> list[dict[str, Any]]:
        """The nodes with a live heartbeat: ``{node_id, url, alive}`` each."""
        ...

    def health(self) -> dict[str, Any]:
        """The cluster part of ``/healthz``: ``{node_id, connected, owned_agents,
        failovers, rebuilds, fenced_refusals}``."""
        ...

    async def agent_ids(self) -> list[str]:
        """Every agent some node of the cluster claimed (the Memory Inspector's list and
        ``agents.list`` show the whole cluster's agents)."""
        ...

    async def locate(self, agent_id: str) -> OwnerLocation | None: ...

    def generation(self, agent_id: str) -> int | None:
        """The generation this node holds the agent under, ``None`` if not owned here."""
        ...
