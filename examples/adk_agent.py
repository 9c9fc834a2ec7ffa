"""A Google ADK agent whose sessions live in session-server (one constructor changes).

An ADK ``Runner`` with a tool talks for 20 turns with compaction on; halfway the server
restarts, and a new runner resumes the same session. Run `scripts/serve` first, then
(with a real model: set GOOGLE_API_KEY and leave out the base URL)::

    .venv-adk/bin/python examples/adk_agent.py ws://127.0.0.1:8765 [GEMINI_BASE_URL]
"""

import asyncio
import sys
from collections.abc import Awaitable, Callable

from google.adk.agents import LlmAgent
from google.adk.models.google_llm import Gemini
from google.adk.runners import Runner
from google.genai import types

from session_server.integrations.adk import SessionServerSessionService

APP = "weather"
TURNS = 20


def get_weather(city: str) -> dict[str, str]:
    """The weather in a city."""
    return {"city": city, "forecast": f"{city}: 18°C and sunny"}


def make_runner(server_url: str, model_base_url: str | None) -> Runner:
    agent = LlmAgent(
        name="weather_agent",
        model=Gemini(model="gemini-2.5-flash", base_url=model_base_url),
        instruction="Answer with the weather tool. Be brief.",
        tools=[get_weather],
    )
    # The one change: sessions in session-server, compacted (placeholders for old tool
    # outputs beyond the last 4 turns) instead of ADK's own compaction.
    sessions = SessionServerSessionService(
        url=server_url,
        agent_id="weather-bot",
        strategy={"mode": "compact", "compact_keep": 4, "compact_trigger_turns": 6},
    )
    return Runner(app_name=APP, agent=agent, session_service=sessions)


async def ask(runner: Runner, session_id: str, text: str) -> str:
    message = types.Content(role="user", parts=[types.Part(text=text)])
    answer = ""
    async for event in runner.run_async(user_id="ada", session_id=session_id, new_message=message):
        if event.is_final_response() and event.content and event.content.parts:
            answer = "".join(p.text or "" for p in event.content.parts)
    return answer


async def main(
    server_url: str,
    model_base_url: str | None = None,
    restart: Callable[[], Awaitable[None]] | None = None,
) -> None:
    runner = make_runner(server_url, model_base_url)
    session = await runner.session_service.create_session(app_name=APP, user_id="ada")
    for turn in range(1, TURNS + 1):
        if turn == TURNS // 2 + 1 and restart is not None:
            await runner.session_service.close()  # type: ignore[attr-defined]
            await restart()
            runner = make_runner(server_url, model_base_url)  # a new process would do this
            print("resumed after restart")
        answer = await ask(runner, session.id, f"Weather in city {turn}?")
        print(f"turn {turn}: {answer}")
    resumed = await runner.session_service.get_session(
        app_name=APP, user_id="ada", session_id=session.id
    )
    assert resumed is not None
    print(f"events in the compacted session: {len(resumed.events)}")
    await runner.session_service.close()  # type: ignore[attr-defined]


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
