"""``cluster.status`` and ``cluster.owner`` (server endpoint ``/v1``), DESIGN §12.

In cluster mode they read the node (``values.cluster_view.ClusterMember``). On a single
node there is no cluster: ``cluster.status`` answers ``{node_id: null, nodes: [],
owned_agents: N}`` (every agent of the memory dir is served here) and ``cluster.owner``
``{node_id: null, generation: null}``.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from ..values.agent_ids import validate_agent_id
from ..values.cluster_view import ClusterMember
from ..values.errors import ForbiddenError
from .method_spec import CallContext, RpcParams

__all__ = ["ClusterOwnerParams", "cluster_owner", "cluster_status"]


class ClusterOwnerParams(RpcParams):
    agent_id: Annotated[str, Field(min_length=1, max_length=512)]


def _member(ctx: CallContext) -> ClusterMember | None:
    member = ctx.registry.turn_logs
    return member if isinstance(member, ClusterMember) else None


async def cluster_status(ctx: CallContext, p: RpcParams) -> dict[str, Any]:
    """This node, the live nodes, the agents owned here."""
    member = _member(ctx)
    if member is None:
        agents = await ctx.registry.list_agents_async()
        return {"node_id": None, "nodes": [], "owned_agents": len(agents)}
    return {
        "node_id": member.node_id,
        "nodes": await member.nodes(),
        "owned_agents": member.owned_agents,
    }


async def cluster_owner(ctx: CallContext, p: ClusterOwnerParams) -> dict[str, Any]:
    """The agent's live owner. An agent with none (never claimed, or its owner's lease
    lapsed) is claimed by this node, so the answer always names a node that serves it."""
    agent_id = validate_agent_id(p.agent_id)
    if not ctx.permits(agent_id):
        raise ForbiddenError(
            f"agent_id: this token may not address agent {agent_id!r}", data={"field": "agent_id"}
        )
    member = _member(ctx)
    if member is None:
        return {"node_id": None, "generation": None}
    location = await member.locate(agent_id)
    if location is not None:
        return {"node_id": location.node_id, "generation": location.generation}
    return {"node_id": member.node_id, "generation": member.generation(agent_id)}
