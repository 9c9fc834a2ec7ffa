"""Child process for the recall crash tests (killed with SIGKILL while it indexes).

Usage: ``python recall_child.py MEMORY_DIR AGENT_ID [SHARD_CHARS [delete]]``

Opens the agent (activation starts the background backfill of its recall index) and
prints ``INDEXING`` after each search that still says ``indexing: true``, then ``DONE``
once the index is whole. ``SHARD_CHARS`` lowers the size of the index's shards (many
shards of a few events: the backfill makes new ones all the time). With ``delete`` it
then deletes events of session ``s`` one ``events.delete`` (or ``events.pop``) at a
time, each delete rewriting its shard, printing ``DELETED`` after each.
"""

from __future__ import annotations

import asyncio
import random
import sys

from session_server.runtime.registry import ActorRegistry
from session_server.storage import recall_shards


async def main(memory_dir: str, agent_id: str, delete: bool) -> None:
    async with ActorRegistry(memory_dir, synchronous="FULL", idle_timeout=None) as reg:
        actor = await reg.get(agent_id)
        while (await actor.search("lorem"))["indexing"]:
            print("INDEXING", flush=True)
        print("DONE", flush=True)
        rng = random.Random()
        while delete:
            events = await actor.load_events("s", limit=500, tail=rng.random() < 0.5)
            if not events:
                return
            if rng.random() < 0.2:
                await actor.pop_event("s")
            else:
                await actor.delete_events("s", [e.id for e in rng.sample(events, 3)])
            print("DELETED", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 3:
        recall_shards.shard_chars = int(sys.argv[3])
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[4:] == ["delete"]))
