"""An OpenAI Agents SDK agent whose memory lives in session-server (two lines).

Run `scripts/serve` first, then (with a real model: set OPENAI_API_KEY and leave out the
base URL)::

    .venv/bin/python examples/openai_agents_session.py ws://127.0.0.1:8765 [OPENAI_BASE_URL]
"""

import asyncio
import sys

from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

from session_server.integrations.openai_agents import SessionServerSession


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"{city}: 18°C and sunny"


async def main(server_url: str, openai_base_url: str | None = None) -> None:
    set_tracing_disabled(True)
    model = OpenAIResponsesModel("gpt-4.1-mini", AsyncOpenAI(base_url=openai_base_url))
    agent = Agent(name="assistant", instructions="Be brief.", tools=[get_weather], model=model)

    # The two lines: a durable, server-side session, then run as with SQLiteSession.
    session = SessionServerSession("user-42", url=server_url, agent_id="support-bot")
    result = await Runner.run(agent, "Weather in Paris?", session=session)
    # Optional third line, for token-pressure compaction: hooks=session.usage_hooks().

    print("answer:", result.final_output)
    for item in await session.get_items():
        print(item.get("type", "message"), item.get("role", ""))
    await session.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
