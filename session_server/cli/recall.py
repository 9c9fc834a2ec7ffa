"""``session-server reindex AGENT_ID``: rebuild an agent's recall index (docs/recall.md).

Offline (the default) it opens the agent under ``--memory-dir``, empties its index and
indexes every event again, and returns when the index is whole. With ``--url`` it asks the
server that holds the agent (``memory.reindex``), which rebuilds it in the background
while serving; searches meanwhile say ``indexing: true``.
"""

from __future__ import annotations

import argparse
from typing import Any

from .jobs import remote_client, run_job, run_offline
from .options import add_memory_dir, add_remote

__all__ = ["reindex_arguments", "run_reindex"]


def reindex_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("agent_id", help="the agent whose recall index to rebuild")
    add_memory_dir(p)
    add_remote(p)


def run_reindex(args: argparse.Namespace) -> int:
    if args.url:

        async def remote() -> str:
            async with remote_client(args, args.agent_id) as client:
                count = await client.reindex()
            return f"reindexing {count} events of agent {args.agent_id!r} on the server"

        return run_job(args, remote)

    async def job(actor: Any) -> str:
        count = await actor.reindex()
        await actor.recall_settled()
        return f"reindexed {count} events of agent {actor.agent_id!r}"

    return run_offline(args, job)
