"""``serve --cluster-secret-file``: read at start, a bad file stops the start (exit 2)."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest

from session_server.cli.main import build_parser
from tests.support.server import ServerProcess


def test_the_option_and_its_environment_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "secret"
    args = build_parser().parse_args(["serve", "--cluster-secret-file", str(path)])
    assert args.cluster_secret_file == path
    monkeypatch.setenv("SESSION_SERVER_CLUSTER_SECRET_FILE", str(path))
    assert build_parser().parse_args(["serve"]).cluster_secret_file == path


async def test_a_short_secret_stops_the_start_a_good_one_serves(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("too short\n")
    bad = ServerProcess(tmp_path / "m1", "--cluster-secret-file", str(secret))
    done = await asyncio.to_thread(
        subprocess.run, bad.argv, env=bad.env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "at least 32 bytes" in done.stderr
    secret.write_text("s" * 64 + "\n")
    good = ServerProcess(tmp_path / "m2", "--cluster-secret-file", str(secret))
    await asyncio.to_thread(good.start)
    try:
        assert good.url.startswith("ws://127.0.0.1:")
    finally:
        await asyncio.to_thread(good.terminate)
