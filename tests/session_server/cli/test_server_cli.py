"""``session-server`` command line: help text, options from SESSION_SERVER_* variables."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from session_server.cli import build_parser, main
from session_server.cli.serve import allowed_origins, stream_limits
from session_server.client import SessionClient
from session_server.values.errors import ForbiddenError
from session_server.values.streams import StreamLimits
from tests.support.server import ServerProcess

SERVE_OPTIONS = (
    "--host",
    "--port",
    "--memory-dir",
    "--token",
    "--synchronous",
    "--max-frame-bytes",
    "--log-level",
    "--allow-origin",
    "--max-handshakes",
    "--handshake-timeout",
    "--idle-timeout",
    "--max-connections",
)


def test_top_level_help_documents_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for option in SERVE_OPTIONS:
        assert option in out
    assert "SESSION_SERVER_TOKENS" in out and "SESSION_SERVER_MEMORY_DIR" in out
    flat = " ".join(out.split())  # argparse wraps the help text
    for variable, default in (
        ("SESSION_SERVER_ALLOW_ORIGIN", "default: none"),
        ("SESSION_SERVER_MAX_HANDSHAKES", "default 128"),
        ("SESSION_SERVER_HANDSHAKE_TIMEOUT", "default 10"),
        ("SESSION_SERVER_IDLE_TIMEOUT", "default 300"),
    ):
        assert f"{variable}; {default}" in flat or f"{variable}: " in flat, variable
        assert default in flat, variable


def test_environment_supplies_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SESSION_SERVER_PORT", "9999")
    monkeypatch.setenv("SESSION_SERVER_MEMORY_DIR", "/tmp/somewhere")
    monkeypatch.setenv("SESSION_SERVER_SYNCHRONOUS", "normal")
    monkeypatch.setenv("SESSION_SERVER_MAX_FRAME_BYTES", "1024")
    args = build_parser().parse_args(["serve"])
    assert args.port == 9999
    assert str(args.memory_dir) == "/tmp/somewhere"
    assert args.synchronous == "NORMAL"
    assert args.max_frame_bytes == 1024
    assert build_parser().parse_args(["serve", "--port", "0"]).port == 0


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "--token", ":x*"],
        ["serve", "--port", "70000"],
        ["serve", "--max-frame-bytes", "0"],
        ["serve", "--allow-origin", "example.com"],
        ["serve", "--max-handshakes", "0"],
        ["serve", "--handshake-timeout", "0"],
    ],
)
def test_bad_options_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    assert "error" in capsys.readouterr().err


async def test_tokens_from_environment(tmp_path: Path) -> None:
    proc = ServerProcess(tmp_path / "memory", env={"SESSION_SERVER_TOKENS": "envtok"})
    url = await asyncio.to_thread(proc.start)
    try:
        with pytest.raises(ForbiddenError):
            await SessionClient(url, "a").connect()
        async with SessionClient(url, "a", token="envtok") as client:
            await client.create_session(session_id="s")
            assert len(await client.list_sessions()) == 1
        assert await asyncio.to_thread(proc.terminate) == 0
    finally:
        proc.kill()
    assert "127.0.0.1 only" not in proc.stderr_text


def test_allowed_origins_from_options_or_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    args = build_parser().parse_args(
        ["serve", "--allow-origin", "http://A.example:3000", "--allow-origin", "*"]
    )
    assert allowed_origins(args) == ["http://a.example:3000", "*"]
    monkeypatch.setenv("SESSION_SERVER_ALLOW_ORIGIN", "http://b.example, null")
    assert allowed_origins(build_parser().parse_args(["serve"])) == ["http://b.example:80", "null"]
    monkeypatch.setenv("SESSION_SERVER_ALLOW_ORIGIN", "b.example")
    with pytest.raises(ValueError, match=r"'b\.example' is not an origin"):
        allowed_origins(build_parser().parse_args(["serve"]))


async def test_a_served_process_checks_origins_from_the_environment(tmp_path: Path) -> None:
    proc = ServerProcess(
        tmp_path / "memory", env={"SESSION_SERVER_ALLOW_ORIGIN": "http://app.example:3000"}
    )
    url = await asyncio.to_thread(proc.start)
    try:
        async with connect(f"{url}/v1", additional_headers={"Origin": "http://app.example:3000"}):
            pass
        with pytest.raises(InvalidStatus) as refused:
            await connect(f"{url}/v1", additional_headers={"Origin": "http://evil.example"})
        assert refused.value.response.status_code == 403
        assert await asyncio.to_thread(proc.terminate) == 0
    finally:
        proc.kill()


def test_the_event_loop_is_uvloop_when_installed_or_asked_for() -> None:
    import uvloop  # installed with the dev extra

    from session_server.cli import serve

    assert serve._loop_factory("auto") is uvloop.new_event_loop
    assert serve._loop_factory("uvloop") is uvloop.new_event_loop
    assert serve._loop_factory("asyncio") is None
    assert build_parser().parse_args(["serve"]).loop == "auto"
    assert build_parser().parse_args(["serve", "--loop", "asyncio"]).loop == "asyncio"


def test_unread_answer_bounds_from_options_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    args = build_parser().parse_args(["serve"])
    assert args.max_unread_answer_bytes is None  # derived from the frame size
    assert args.max_connection_answer_bytes is None
    assert args.write_timeout == 60.0
    monkeypatch.setenv("SESSION_SERVER_MAX_UNREAD_ANSWER_BYTES", "1000000")
    monkeypatch.setenv("SESSION_SERVER_MAX_CONNECTION_ANSWER_BYTES", "300000")
    monkeypatch.setenv("SESSION_SERVER_WRITE_TIMEOUT", "5")
    args = build_parser().parse_args(["serve"])
    assert (args.max_unread_answer_bytes, args.max_connection_answer_bytes) == (1000000, 300000)
    assert args.write_timeout == 5.0
    args = build_parser().parse_args(["serve", "--max-connection-answer-bytes", "400000"])
    assert args.max_connection_answer_bytes == 400000


def test_live_turn_bounds_from_options_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert stream_limits(build_parser().parse_args(["serve"])) == StreamLimits()
    monkeypatch.setenv("SESSION_SERVER_STREAM_MAX_CHUNKS", "500")
    monkeypatch.setenv("SESSION_SERVER_STREAM_IDLE_SECONDS", "30")
    args = build_parser().parse_args(
        [
            "serve",
            "--stream-max-chunk-bytes", "2048",
            "--stream-max-append-chunks", "50",
            "--stream-max-bytes", "100000",
            "--stream-max-per-connection", "2",
        ]
    )  # fmt: skip
    assert stream_limits(args) == StreamLimits(
        max_chunk_bytes=2048,
        max_chunks_per_append=50,
        max_stream_chunks=500,
        max_stream_bytes=100000,
        max_streams_per_connection=2,
        idle_seconds=30.0,
    )


@pytest.mark.parametrize("value", ["0", "-1", "many"])
def test_a_live_turn_bound_must_be_a_positive_int(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(["serve", "--stream-max-chunks", value])
    assert exit_info.value.code == 2
    assert "--stream-max-chunks" in capsys.readouterr().err
