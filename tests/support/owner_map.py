"""``OwnerMap``: a small ``OwnerDirectory`` for front-door tests (the cluster's is built
on NATS elsewhere): a dict agent -> ``OwnerLocation`` (absent or ``None``: serve here),
the agents ``forget`` was called for, and an optional ``on_forget`` that moves an agent
the way a cluster's claim would (``owners[agent] = ...``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import msgspec
from websockets.asyncio.server import ServerConnection

from session_server.rpc.protocol import error_response
from session_server.values.errors import NotOwnerError
from session_server.values.ownership import OwnerLocation

__all__ = ["SECRET", "OwnerMap", "at", "not_owner_node"]

SECRET = b"front-door-tests-cluster-secret-32+bytes"


def at(node_id: str, url: str, generation: int = 1) -> OwnerLocation:
    return OwnerLocation(node_id=node_id, url=url, generation=generation)


class OwnerMap:
    def __init__(
        self,
        owners: dict[str, OwnerLocation | None] | None = None,
        on_forget: Callable[[OwnerMap, str], None] | None = None,
    ) -> None:
        self.owners: dict[str, OwnerLocation | None] = dict(owners or {})
        self.on_forget = on_forget
        self.forgotten: list[str] = []
        self.located = 0

    async def locate(self, agent_id: str) -> OwnerLocation | None:
        self.located += 1
        return self.owners.get(agent_id)

    def forget(self, agent_id: str) -> None:
        self.forgotten.append(agent_id)
        if self.on_forget is not None:
            self.on_forget(self, agent_id)


def not_owner_node(agent_id: str) -> Callable[[ServerConnection], Awaitable[None]]:
    """A WebSocket handler for a node that lost ``agent_id``'s fence: every request is
    refused as the cluster's ``NotOwnerError`` is (-32005, ``reason: "not_owner"``)."""

    async def handler(ws: ServerConnection) -> None:
        async for data in ws:
            request = msgspec.json.decode(data)
            error = NotOwnerError(
                "not the owner of this agent",
                data={"reason": "not_owner", "retryable": True, "agent_id": agent_id},
            )
            await ws.send(msgspec.json.encode(error_response(request["id"], error)), text=True)

    return handler
