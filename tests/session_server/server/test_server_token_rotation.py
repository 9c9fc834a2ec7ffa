"""Token rotation in a real ``session-server serve`` subprocess: SIGHUP (and a file change)
re-reads the token file and the secret file and closes the connections whose token is no
longer valid; ``session-server token`` prints a token that server accepts."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus

from session_server.auth import Authenticator, mint_token
from session_server.client import SessionClient
from tests.support.server import ROOT, ServerProcess

OLD_SECRET = "old-secret-" + "a" * 32
NEW_SECRET = "new-secret-" + "b" * 32
AGENT = "support-bot"


def replace_file(path: Path, text: str) -> None:
    """Write atomically (as an operator's tooling would), so a reload never sees half."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


async def status_of(url: str, token: str) -> int:
    try:
        async with connect(url, additional_headers={"Authorization": f"Bearer {token}"}):
            return 101
    except InvalidStatus as exc:
        return exc.response.status_code


async def open_as(url: str, token: str) -> ClientConnection:
    return await connect(url, additional_headers={"Authorization": f"Bearer {token}"})


async def closed_with(ws: ClientConnection) -> tuple[int | None, str | None]:
    await asyncio.wait_for(ws.wait_closed(), 20)
    return ws.close_code, ws.close_reason


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    tokens = tmp_path / "tokens.txt"
    secret = tmp_path / "secret.txt"
    replace_file(tokens, "# static tokens\nalpha\nkeeper:support-*:write\n")
    replace_file(secret, OLD_SECRET + "\n")
    return tokens, secret


def rotate(tokens: Path, secret: Path) -> None:
    """alpha removed, keeper demoted to read, beta added; a new secret replaces the old."""
    replace_file(tokens, "keeper:support-*:read\nbeta\n")
    replace_file(secret, NEW_SECRET + "\n")


async def check_rotated(url: str, alpha: ClientConnection, old_jwt: ClientConnection) -> None:
    assert await closed_with(alpha) == (1008, "token no longer valid: unknown token")
    assert await closed_with(old_jwt) == (
        1008,
        "token no longer valid: token signature does not verify",
    )
    assert await status_of(url, "alpha") == 401
    assert await status_of(url, mint_token(OLD_SECRET, agents=["*"], scope="read", ttl=60)) == 401
    assert await status_of(url, "beta") == 101
    assert await status_of(url, mint_token(NEW_SECRET, agents=["*"], scope="read", ttl=60)) == 101


async def start(tmp_path: Path, files: tuple[Path, Path], interval: str) -> ServerProcess:
    tokens, secret = files
    proc = ServerProcess(
        tmp_path / "memory",
        "--token-file",
        str(tokens),
        "--token-secret-file",
        str(secret),
        "--token-reload-interval",
        interval,
    )
    await asyncio.to_thread(proc.start)
    return proc


async def test_sighup_rotates_tokens_and_closes_invalid_connections(
    tmp_path: Path, files: tuple[Path, Path]
) -> None:
    proc = await start(tmp_path, files, "0")  # only SIGHUP reloads
    try:
        url = f"{proc.url}/v1/agents/{AGENT}"
        old_jwt = mint_token(OLD_SECRET, agents=["support-*"], scope="write", ttl=600)
        alpha = await open_as(url, "alpha")
        by_jwt = await open_as(url, old_jwt)
        async with SessionClient(proc.url, AGENT, token="keeper") as keeper:
            sid = await keeper.create_session()
            rotate(*files)
            # Nothing changes before the signal (the watcher is off).
            assert await status_of(url, "alpha") == 101
            assert proc.proc is not None
            proc.proc.send_signal(signal.SIGHUP)
            await check_rotated(url, alpha, by_jwt)
            # keeper's connection stays open, now read-only.
            assert (await keeper.get_session(sid))["id"] == sid
            with pytest.raises(Exception, match="needs scope 'write', this token has 'read'"):
                await keeper.create_session()
        assert proc.terminate() == 0
        # (At least alpha's and the old token's; the probe above may still be closing.)
        assert re.search(
            r"tokens reloaded \(SIGHUP\): 2 static, 1 secret\(s\); [23] connection\(s\) closed",
            proc.stderr_text,
        )
    finally:
        proc.kill()


async def test_a_changed_file_is_reloaded_and_a_broken_one_ignored(
    tmp_path: Path, files: tuple[Path, Path]
) -> None:
    proc = await start(tmp_path, files, "0.05")
    try:
        url = f"{proc.url}/v1/agents/{AGENT}"
        tokens, secret = files
        # A broken secret file is refused: the tokens in force stay valid.
        alpha = await open_as(url, "alpha")
        replace_file(secret, "too short\n")
        assert proc.proc is not None
        proc.proc.send_signal(signal.SIGHUP)  # also a reload, to have a point to wait for
        by_jwt = await open_as(
            url, mint_token(OLD_SECRET, agents=["support-*"], scope="write", ttl=600)
        )
        replace_file(secret, OLD_SECRET + "\n")
        # A good rotation, picked up without a signal.
        rotate(tokens, secret)
        await check_rotated(url, alpha, by_jwt)
        assert proc.terminate() == 0
        assert "must be at least 32 bytes, got 9" in proc.stderr_text
        assert "the previous tokens stay in force" in proc.stderr_text
        assert "tokens reloaded (file changed)" in proc.stderr_text
    finally:
        proc.kill()


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("SESSION_SERVER_")}
    full_env.update(env or {})
    full_env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "session_server", *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=str(ROOT),
        timeout=60,
        check=False,
    )


def test_token_command_prints_a_token_the_server_accepts(files: tuple[Path, Path]) -> None:
    _tokens, secret = files
    out = run_cli(
        "token",
        "--agents",
        "support-*",
        "helper",
        "--sessions",
        "s1",
        "s2",
        "--scope",
        "write",
        "--ttl",
        "300",
        "--token-secret-file",
        str(secret),
    )
    assert out.returncode == 0, out.stderr
    token = out.stdout.strip()
    grant = Authenticator(secrets=[OLD_SECRET.encode()]).authenticate(token, time.time())
    assert grant.patterns == ("support-*", "helper")
    assert grant.sessions == frozenset({"s1", "s2"})
    assert grant.scope == "write"
    assert grant.expires_at is not None and 290 <= grant.expires_at - time.time() <= 300
    from_env = run_cli(
        "token",
        "--agents",
        "a",
        "--scope",
        "read",
        "--ttl",
        "5",
        env={"SESSION_SERVER_TOKEN_SECRET": NEW_SECRET},
    )
    assert from_env.returncode == 0, from_env.stderr
    assert Authenticator(secrets=[NEW_SECRET.encode()]).authenticate(
        from_env.stdout.strip(), time.time()
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--agents", "a", "--scope", "read", "--ttl", "5"), "no secret"),
        (("--agents", "a", "--scope", "root", "--ttl", "5"), "invalid choice"),
        (("--agents", "a", "--scope", "read", "--ttl", "0"), "must be at least 1"),
        (("--agents", "a", "--scope", "read"), "--ttl"),
    ],
)
def test_token_command_refusals(args: tuple[str, ...], message: str) -> None:
    out = run_cli("token", *args)
    assert out.returncode == 2
    assert message in out.stderr and out.stdout == ""


def test_serve_refuses_a_bad_secret_or_an_empty_token_file(tmp_path: Path) -> None:
    short = tmp_path / "short.txt"
    short.write_text("short\n")
    out = run_cli("serve", "--port", "0", "--token-secret-file", str(short))
    assert out.returncode == 2 and "must be at least 32 bytes, got 5" in out.stderr
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing yet\n")
    out = run_cli("serve", "--port", "0", "--token-file", str(empty))
    assert out.returncode == 2 and "holds no token" in out.stderr
    out = run_cli("serve", "--port", "0", "--token-file", str(tmp_path / "missing.txt"))
    assert out.returncode == 2 and "cannot read" in out.stderr
