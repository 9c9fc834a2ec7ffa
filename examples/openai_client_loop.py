"""A plain `openai` client loop on session-server: build, render, call, ingest, persist.

Run `scripts/serve` first, then (with a real model: set OPENAI_API_KEY and leave out the
base URL)::

    .venv/bin/python examples/openai_client_loop.py ws://127.0.0.1:8765 [OPENAI_BASE_URL]
"""

import asyncio
import json
import sys

from openai import AsyncOpenAI

from session_server.adapters import openai_chat
from session_server.client import SessionClient
from session_server.events import ContextMessage

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def get_weather(city: str) -> str:
    return f"{city}: 18°C and sunny"


async def main(server_url: str, openai_base_url: str | None = None) -> None:
    llm = AsyncOpenAI(base_url=openai_base_url)
    async with SessionClient(server_url, "support-bot") as client:
        await client.get_or_create_session("user-7")
        turn = [ContextMessage(role="user", content="Weather in Paris?")]
        while True:
            # Build and render: the stored history (compacted under a strategy) plus this turn.
            ctx = await client.build_context("user-7", system_instructions="Be brief.")
            ctx.add_messages(turn)
            payload = openai_chat.adapter.to_model_messages(ctx.system_instructions, ctx.messages)
            # Call the model.
            completion = await llm.chat.completions.create(
                model="gpt-4.1-mini", tools=TOOLS, **payload
            )
            # Ingest its answer as messages (tool calls, reasoning), then run the tools.
            answer = openai_chat.from_response(completion)
            turn.extend(answer)
            for call in answer[-1].tool_calls or ():
                result = get_weather(**call.arguments)
                turn.append(ContextMessage(role="tool", tool_call_id=call.id, content=result))
            if not answer[-1].tool_calls:
                break
        # Persist the whole turn at once, with the usage that drives compaction.
        usage = completion.usage.model_dump() if completion.usage else None
        await client.persist_turn("user-7", turn, base_seq=ctx.base_seq, usage=usage)
        print("answer:", answer[-1].content)
        for event in await client.load_events("user-7"):
            print(event.seq, event.action, json.dumps(event.content, ensure_ascii=False))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
