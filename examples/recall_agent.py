"""An agent that recalls what compaction took out of its prompt, with the recall tools.

Turn 3 holds a fact; later turns push it out, a summary replaces the old turns, and then
the user asks for the fact. The model gets session-server's ``recall_search`` and
``recall_expand`` tools (``memory.tools``), calls one, and the server runs it
(``memory.tool_call``): the raw turn 3 is still stored and indexed.

Run `scripts/serve` first, then (with a real model: set OPENAI_API_KEY and leave out the
base URL)::

    .venv/bin/python examples/recall_agent.py ws://127.0.0.1:8765 [OPENAI_BASE_URL]
"""

import asyncio
import sys

from openai import AsyncOpenAI

from session_server.adapters import openai_chat
from session_server.client import SessionClient
from session_server.events import ContextMessage

SESSION = "traveller"
SMALL_TALK = [
    "I am planning a trip to Lisbon.",
    "I prefer trains to planes.",
    "My locker code at the station is 4417.",
    "I like custard tarts.",
    "I will stay four nights.",
    "I want to see the tiles museum.",
    "Remind me to pack an umbrella.",
]


async def ask(client: SessionClient, llm: AsyncOpenAI, question: str) -> str:
    """One turn: the model may call the recall tools until it answers."""
    tools = await client.memory_tools("openai-chat")
    turn = [ContextMessage(role="user", content=question)]
    while True:
        ctx = await client.build_context(SESSION, system_instructions="Be brief.")
        ctx.add_messages(turn)
        payload = openai_chat.adapter.to_model_messages(ctx.system_instructions, ctx.messages)
        completion = await llm.chat.completions.create(model="gpt-4.1-mini", tools=tools, **payload)
        answer = openai_chat.from_response(completion)
        turn.extend(answer)
        calls = answer[-1].tool_calls or ()
        for call in calls:
            result = await client.tool_call(SESSION, call.name, call.arguments)
            print(f"tool {call.name}({call.arguments}) ->\n{result['content']}")
            turn.append(
                ContextMessage(role="tool", tool_call_id=call.id, content=result["content"])
            )
        if not calls:
            break
    await client.persist_turn(SESSION, turn, base_seq=ctx.base_seq)
    return answer[-1].content or ""


async def main(server_url: str, openai_base_url: str | None = None) -> None:
    llm = AsyncOpenAI(base_url=openai_base_url)
    async with SessionClient(server_url, "travel-bot") as client:
        await client.get_or_create_session(SESSION)
        for text in SMALL_TALK:  # turns 1..7, each with the assistant's acknowledgement
            await client.persist_turn(
                SESSION,
                [
                    ContextMessage(role="user", content=text),
                    ContextMessage(role="assistant", content="Noted."),
                ],
            )
        # Summarise everything but the last two turns: turn 3 leaves the prompt.
        report = await client.compact(SESSION, strategy={"mode": "summarize", "raw_tail_turns": 2})
        print("compacted:", report["compacted"])
        ctx = await client.build_context(SESSION)
        print("turn 3 in the prompt:", any("station" in m.content for m in ctx.messages))
        print("answer:", await ask(client, llm, "What was my locker code?"))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
