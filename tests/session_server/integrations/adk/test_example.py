"""``examples/adk_agent.py``: an ADK ``Runner`` with a tool on a fake Gemini server, 20
turns with compaction, a server restart halfway and the session resumed."""

from __future__ import annotations

from pathlib import Path

import pytest
from google.adk.events.event import Event

from session_server.integrations.adk import SessionServerSessionService
from tests.support.gemini_server import gemini_base_url, gemini_text, weather_gemini
from tests.support.openai_server import FakeOpenAIServer
from tests.support.server import RestartableServer
from tests.test_examples import load


async def test_adk_agent_example(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", "test")
    module = load("adk_agent")
    server = RestartableServer(tmp_path / "memory")
    await server.start()

    async def restart() -> None:
        await server.stop()
        await server.start()

    try:
        with FakeOpenAIServer(weather_gemini) as model:
            await module.main(server.url, gemini_base_url(model.base_url), restart)
            statuses = [r for r in model.requests]
        out = capsys.readouterr().out
        assert server.starts == 2 and "resumed after restart" in out
        for turn in range(1, 21):
            assert f"turn {turn}: It is city {turn}: 18°C and sunny." in out
        # Every model request was valid (the fake refuses unpaired calls with a 400, which
        # would have failed the run), and the last ones carried placeholders.
        last = statuses[-1]["body"]["contents"]
        assert "⟦removed: tool output for get_weather" in str(last)
        assert gemini_text(last[-1]) == "" and "functionResponse" in str(last[-1])

        service = SessionServerSessionService(url=server.url, agent_id="weather-bot")
        listed = (await service.list_sessions(app_name="weather", user_id="ada")).sessions
        [session] = listed
        raw = await service.get_session(app_name="weather", user_id="ada", session_id=session.id)
        assert raw is not None
        texts = [
            gemini_text(e.content.model_dump(exclude_none=True))
            for e in raw.events
            if isinstance(e, Event) and e.content
        ]
        assert sum(1 for t in texts if t.startswith("Weather in city")) == 20
        assert len(raw.events) == 80  # user, call, result, answer: all 20 turns kept raw
        await service.close()
    finally:
        await server.stop()
