"""Writer process for the group-commit crash test (killed with SIGKILL at random moments).

Usage: ``python group_crash_writer.py MEMORY_DIR AGENT_ID WRITERS [--max-turns N]``

Opens an ``ActorRegistry`` on MEMORY_DIR with ``synchronous="FULL"``; WRITERS concurrent
tasks each persist 4-message turns (``crash_writer.turn_messages``) on their own session
``g-<w>`` of one agent, back to back, so the appends that queue up while a commit is in
flight are committed together (group commit). It prints ``READY <w> <last_turn>`` per
writer before the first turn, then, after each acknowledged turn, ``ACK <w> <turn>
<first_seq> <last_seq> <commits>``, where ``commits`` is how many transactions the
agent's writer connection has committed so far (fewer than the turns: groups formed).
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from session_server.runtime.registry import ActorRegistry
from tests.support.crash_writer import parse_turn, turn_messages


def session_of(writer: int) -> str:
    return f"g-{writer}"


async def run(memory_dir: str, agent_id: str, writers: int, max_turns: int) -> None:
    async with ActorRegistry(memory_dir, synchronous="FULL", idle_timeout=None) as reg:
        actor = await reg.get(agent_id)
        commits = [0]

        def traced(sql: str) -> None:
            if sql == "COMMIT":
                commits[0] += 1

        (await actor.store()).writer.set_trace_callback(traced)
        starts = []
        for w in range(writers):
            sid = session_of(w)
            if await actor.get_session(sid) is None:
                await actor.create_session(session_id=sid)
            last = await actor.load_events(sid, limit=1, tail=True)
            starts.append(parse_turn(last[0].content) if last else 0)
            print(f"READY {w} {starts[w]}", flush=True)

        async def write(w: int) -> None:
            sid = session_of(w)
            for turn in range(starts[w] + 1, starts[w] + 1 + max_turns):
                ctx = await actor.build_working_context(sid, limit=50)
                ctx.add_messages(turn_messages(turn))
                result = await actor.persist_working_context(
                    sid, ctx, idempotency_key=f"turn-{turn}"
                )
                sys.stdout.write(
                    f"ACK {w} {turn} {result.seqs[0]} {result.last_seq} {commits[0]}\n"
                )
                sys.stdout.flush()

        await asyncio.gather(*(write(w) for w in range(writers)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("memory_dir")
    parser.add_argument("agent_id")
    parser.add_argument("writers", type=int)
    # A bound so a writer the test failed to kill still ends by itself.
    parser.add_argument("--max-turns", type=int, default=20_000)
    args = parser.parse_args()
    asyncio.run(run(args.memory_dir, args.agent_id, args.writers, args.max_turns))


if __name__ == "__main__":
    main()
