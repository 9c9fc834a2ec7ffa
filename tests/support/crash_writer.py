"""Writer process for the crash-safety test (killed with SIGKILL at random moments).

Usage: ``python crash_writer.py MEMORY_DIR AGENT_ID SESSION_ID [--max-turns N]``

Opens an ``ActorRegistry`` on MEMORY_DIR with ``synchronous="FULL"``, creates the session
if it does not exist, finds the last stored turn number from ``load_events`` and then
appends 4-message turns (user, assistant with a tool call, tool result, assistant answer)
through ``build_working_context`` / ``persist_working_context``. After each acknowledged
turn it prints ``ACK <turn_no> <first_seq> <last_seq>`` and flushes stdout. It prints
``READY <last_turn>`` once before the first turn.

``turn_messages`` and ``parse_turn`` are shared with the test, which checks the stored
contents against them.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys

from session_server.runtime.registry import ActorRegistry
from session_server.values.context import WorkingContext
from session_server.values.events import ContextMessage, ToolCall

TOOL_NAME = "lookup"
_TURN_RE = re.compile(r"^answer of turn (\d+)$")


def turn_messages(turn: int) -> list[ContextMessage]:
    """The 4 messages of turn ``turn``; every one encodes the turn number."""
    call_id = f"call-{turn}"
    return [
        ContextMessage(role="user", content=f"question of turn {turn}"),
        ContextMessage(
            role="assistant",
            content="",
            tool_calls=[ToolCall(id=call_id, name=TOOL_NAME, arguments={"turn": turn})],
        ),
        ContextMessage(
            role="tool", content=f"result of turn {turn}", tool_call_id=call_id, name=TOOL_NAME
        ),
        ContextMessage(role="assistant", content=f"answer of turn {turn}"),
    ]


def parse_turn(answer_content: str) -> int:
    """The turn number encoded in the content of a turn's final assistant answer."""
    match = _TURN_RE.match(answer_content)
    if match is None:
        raise ValueError(f"not a turn answer: {answer_content!r}")
    return int(match.group(1))


async def run(memory_dir: str, agent_id: str, session_id: str, max_turns: int) -> None:
    async with ActorRegistry(memory_dir, synchronous="FULL", idle_timeout=None) as reg:
        actor = await reg.get(agent_id)
        if await actor.get_session(session_id) is None:
            await actor.create_session(session_id=session_id)
        last = await actor.load_events(session_id, limit=1, tail=True)
        # Turns are atomic, so the last stored event is always a turn's final answer.
        turn = parse_turn(last[0].content) if last else 0
        print(f"READY {turn}", flush=True)
        for _ in range(max_turns):
            turn += 1
            ctx: WorkingContext = await actor.build_working_context(
                session_id, system_instructions=["crash-safety writer"], limit=50
            )
            for message in turn_messages(turn):
                ctx.add_message(message)
            result = await actor.persist_working_context(
                session_id, ctx, idempotency_key=f"turn-{turn}"
            )
            sys.stdout.write(f"ACK {turn} {result.seqs[0]} {result.last_seq}\n")
            sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("memory_dir")
    parser.add_argument("agent_id")
    parser.add_argument("session_id")
    # A bound so a writer the test failed to kill still ends by itself.
    parser.add_argument("--max-turns", type=int, default=100_000)
    args = parser.parse_args()
    asyncio.run(run(args.memory_dir, args.agent_id, args.session_id, args.max_turns))


if __name__ == "__main__":
    main()
