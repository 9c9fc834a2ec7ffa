"""A complete session from a client: run `scripts/serve` first, then this file.

.venv/bin/python examples/client_session.py [ws://127.0.0.1:8765]
"""

import asyncio
import sys

from session_server.client import SessionClient
from session_server.events import ContextMessage, ToolCall


async def main(url: str) -> None:
    async with SessionClient(url, "support-bot") as client:
        sid = await client.create_session(metadata={"user": "ada"})

        ctx = await client.build_context(sid, system_instructions=["You are concise."])
        ctx.add_message(ContextMessage(role="user", content="Weather in Paris?"))
        call = ToolCall(id="call-1", name="weather", arguments={"city": "Paris"})
        ctx.add_message(ContextMessage(role="assistant", tool_calls=[call]))
        ctx.add_message(
            ContextMessage(role="tool", tool_call_id="call-1", name="weather", content="18°C")
        )
        ctx.add_message(ContextMessage(role="assistant", content="18°C and sunny."))
        result = await client.persist_context(sid, ctx, on_conflict="reject")
        print("persisted seqs", result.seqs)

        for event in await client.load_events(sid):
            print(event.seq, event.action, event.content)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "ws://127.0.0.1:8765"))
