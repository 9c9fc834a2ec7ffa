"""Session services under test: ADK's own ``InMemorySessionService`` (the behaviour to
match), and ``SessionServerSessionService`` remote (a real server on 127.0.0.1) and
in-process (``registry=``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from google.adk.sessions.base_session_service import BaseSessionService
from google.adk.sessions.in_memory_session_service import InMemorySessionService

from session_server.integrations.adk import SessionServerSessionService
from tests.support.server import running_server

AGENT = "adk-agent"


@pytest.fixture(params=["remote", "local"])
async def served(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[SessionServerSessionService]:
    """``SessionServerSessionService``, remote and in-process."""
    async with running_server(tmp_path / "memory") as server:
        if request.param == "remote":
            service = SessionServerSessionService(url=server.url, agent_id=AGENT)
        else:
            service = SessionServerSessionService(registry=server.registry, agent_id=AGENT)
        try:
            yield service
        finally:
            await service.close()


@pytest.fixture(params=["adk-in-memory", "remote", "local"])
async def session_service(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[BaseSessionService]:
    """ADK's own in-memory service, then ours remote and in-process: each behaviour test
    passes on ADK's service first, so it states ADK's behaviour, not ours."""
    if request.param == "adk-in-memory":
        yield InMemorySessionService()
        return
    async with running_server(tmp_path / "memory") as server:
        if request.param == "remote":
            service = SessionServerSessionService(url=server.url, agent_id=AGENT)
        else:
            service = SessionServerSessionService(registry=server.registry, agent_id=AGENT)
        try:
            yield service
        finally:
            await service.close()
