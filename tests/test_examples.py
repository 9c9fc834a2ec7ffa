"""The README's examples run against a real server."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.support.server import running_server

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "client_session.py"
USER_TOKEN = EXAMPLE.with_name("user_token.py")


async def test_client_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("client_session", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    async with running_server(tmp_path / "memory") as server:
        await module.main(server.url)
    out = capsys.readouterr().out
    assert "persisted seqs [1, 2, 3, 4]" in out
    assert "4 agent_message 18°C and sunny." in out


async def test_user_token_example(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("user_token", USER_TOKEN)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    secret = "example-secret-" + "e" * 32
    async with running_server(tmp_path / "memory", secrets=[secret]) as server:
        await module.main(server.url, secret)
    out = capsys.readouterr().out
    assert "visible sessions: ['ada']" in out
    assert "refused: token.scope: 'session.create' needs scope 'write'" in out
