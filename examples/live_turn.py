"""A live turn: stream a model's reply (the `openai` package, `stream=True`) into
session-server while another client watches it being typed, then store the turn.

Run `scripts/serve` first, then (with a real model: set OPENAI_API_KEY and leave out the
base URL)::

    .venv/bin/python examples/live_turn.py ws://127.0.0.1:8765 [OPENAI_BASE_URL]
"""

import asyncio
import sys

from openai import AsyncOpenAI

from session_server.adapters import openai_chat
from session_server.adapters.streams import ChatCompletionStream
from session_server.client import SessionClient
from session_server.client.live import StreamChunk, StreamClosed
from session_server.events import ContextMessage, SessionEvent


async def watch(sub: object) -> str:
    """What a second tab sees: the reply typed chunk by chunk, then the stored turn."""
    typed: list[str] = []
    async for item in sub:  # type: ignore[attr-defined]
        if isinstance(item, StreamChunk):
            typed += [c["text"] for c in item.chunks if c["type"] == "text"]
        elif isinstance(item, SessionEvent):
            print(f"stored: {item.seq} {item.action} {item.content}")
        elif isinstance(item, StreamClosed):
            break
    return "".join(typed)


async def main(server_url: str, openai_base_url: str | None = None) -> None:
    llm = AsyncOpenAI(base_url=openai_base_url)
    async with (
        SessionClient(server_url, "story-bot") as client,
        SessionClient(server_url, "story-bot") as tab,
    ):
        await client.get_or_create_session("user-9")
        watcher = asyncio.ensure_future(watch(await tab.subscribe_live("user-9")))
        ctx = await client.build_context("user-9", system_instructions="Be brief.")
        user = ContextMessage(role="user", content="Tell me a very short story.")
        ctx.add_messages([user])
        payload = openai_chat.adapter.to_model_messages(ctx.system_instructions, ctx.messages)
        # Open the live turn, then forward the model's chunks as they come.
        writer = await client.stream("user-9", base_seq=ctx.base_seq)
        reply = ChatCompletionStream()
        events = await llm.chat.completions.create(model="gpt-4.1-mini", stream=True, **payload)
        async for event in events:
            await writer.write(*reply.feed(event))
        # Store the turn and end the stream in one transaction.
        result = await writer.close([user, *reply.messages()])
        print(f"persisted seqs {result['seqs']}")
        print(f"the other tab saw: {await watcher}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
