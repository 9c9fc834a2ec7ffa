"""The README's client example runs against a real server."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests.support.server import running_server

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "client_session.py"


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
