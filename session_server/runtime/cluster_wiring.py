"""A cluster node joined to the registry that serves its agents (I/O shell): an agent
the node loses (a fenced append) has its actor hibernated, so the file and caches are
read again at its next claim; the node's counters join the registry's ``/metrics``."""

from __future__ import annotations

import asyncio
import logging

from .cluster_node import ClusterNode
from .registry import ActorRegistry

__all__ = ["join_registry"]

log = logging.getLogger(__name__)


def join_registry(node: ClusterNode, registry: ActorRegistry) -> None:
    tasks: set[asyncio.Task[None]] = set()

    async def drop(agent_id: str) -> None:
        try:
            if registry.has_actor(agent_id):
                actor = await registry.get(agent_id, create=False)
                await actor.hibernate()
        except Exception as exc:
            log.warning("cluster: agent %r not hibernated after its loss: %s", agent_id, exc)

    def lost(agent_id: str) -> None:
        task = asyncio.ensure_future(drop(agent_id))
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    node.on_lost = lost
    node.register_metrics(registry.metrics.registry, registry.operations.namespace)
