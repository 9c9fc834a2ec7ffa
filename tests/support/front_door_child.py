"""A front-door node in a subprocess (for SIGKILL tests): ``python -m
tests.support.front_door_child MEMORY_DIR OWNER_URL AGENT_ID`` runs a ``SessionServer``
on 127.0.0.1 (a free port) whose directory places ``AGENT_ID`` at ``OWNER_URL``, prints
``session-server listening on ws://...`` as ``serve`` does, and serves until killed."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from session_server.runtime.registry import ActorRegistry
from session_server.server import SessionServer
from tests.support.owner_map import SECRET, OwnerMap, at


async def main(memory_dir: Path, owner_url: str, agent_id: str) -> None:
    async with ActorRegistry(memory_dir) as registry:
        directory = OwnerMap({agent_id: at("owner", owner_url)})
        server = SessionServer(registry, port=0, owner_directory=directory, cluster_secret=SECRET)
        await server.start()
        print(f"session-server listening on {server.url} (front door)", flush=True)
        await server.wait_stopped()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2], sys.argv[3]))
