"""Test helpers that run a real session-server.

- ``running_server(memory_dir, tokens=..., secrets=..., **options)``: async context
  manager; an in-process ``SessionServer`` on 127.0.0.1 port 0 over a fresh
  ``ActorRegistry`` (static token specs, signed-token secrets); yields a
  ``RunningServer`` (``.url``, ``.server``, ``.registry``). Stops the server gracefully and
  closes the registry on exit.
- ``ServerProcess``: ``python -m session_server serve --port 0 --memory-dir DIR ...`` as a
  real subprocess; ``start()`` waits for the printed address (``.url``); ``terminate()``
  sends SIGTERM and waits.
- ``RestartableServer(memory_dir)``: an in-process server on a fixed 127.0.0.1 port that
  ``await start()``, ``await stop()`` (graceful, registry closed: state is re-read from
  disk) and ``await restart()`` keep reachable at the same ``url``.
- ``EMPTY_PAGE``: the ``session.list`` answer of an agent without sessions.
- ``make_agents(registry, *agent_ids)``: create empty agents (their store), as a first
  write would; reads of an agent that has none answer -32001.
- ``turn_messages(n)``: the 4-message turn (user, assistant tool call, tool result,
  assistant answer) the tests and benchmarks persist.

Pytest fixtures using these live in the test modules (``server_url`` pattern)::

    @pytest.fixture
    async def server(tmp_path):
        async with running_server(tmp_path / "memory") as running:
            yield running
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from session_server.auth import Authenticator, parse_token_specs
from session_server.runtime.registry import ActorRegistry
from session_server.server import SessionServer
from session_server.values.events import ContextMessage, ToolCall

__all__ = [
    "EMPTY_PAGE",
    "RestartableServer",
    "RunningServer",
    "ServerProcess",
    "free_port",
    "make_agents",
    "running_server",
    "turn_messages",
]

ROOT = Path(__file__).resolve().parents[2]
EMPTY_PAGE: dict[str, Any] = {"sessions": [], "total": 0, "next_offset": None, "next_cursor": None}
"""The ``session.list`` answer of an agent that has no session."""
_LISTENING = re.compile(r"^session-server listening on (ws://\S+) ")


@dataclass
class RunningServer:
    url: str
    server: SessionServer
    registry: ActorRegistry


@contextlib.asynccontextmanager
async def running_server(
    memory_dir: Path,
    *,
    tokens: Sequence[str] = (),
    secrets: Sequence[str] = (),
    synchronous: Literal["FULL", "NORMAL"] = "FULL",
    registry_options: dict[str, Any] | None = None,
    **server_options: Any,
) -> AsyncIterator[RunningServer]:
    """An in-process server on 127.0.0.1:0 (``tokens`` are ``TOKEN[:PATTERNS[:SCOPE]]``
    specs, ``secrets`` the HS256 secrets of signed tokens)."""
    async with ActorRegistry(
        memory_dir, synchronous=synchronous, **(registry_options or {})
    ) as registry:
        server = SessionServer(
            registry,
            host="127.0.0.1",
            port=0,
            auth=Authenticator(parse_token_specs(tokens), [s.encode() for s in secrets]),
            **server_options,
        )
        await server.start()
        try:
            yield RunningServer(server.url, server, registry)
        finally:
            await server.stop()


async def make_agents(registry: ActorRegistry, *agent_ids: str) -> None:
    """Create each agent's store (empty), as the first write to it would."""
    for agent_id in agent_ids:
        await (await registry.get(agent_id, create=True)).list_sessions()


def free_port() -> int:
    """A port of 127.0.0.1 that was free a moment ago (for servers that restart on it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RestartableServer:
    """An in-process server that can be stopped and started again on the same port."""

    def __init__(self, memory_dir: Path, **registry_options: Any) -> None:
        self.memory_dir = memory_dir
        self.port = free_port()
        self.url = f"ws://127.0.0.1:{self.port}"
        self.registry_options = registry_options
        self.registry: ActorRegistry | None = None
        self.server: SessionServer | None = None
        self.starts = 0

    async def start(self) -> None:
        self.registry = ActorRegistry(self.memory_dir, **self.registry_options)
        self.server = SessionServer(self.registry, host="127.0.0.1", port=self.port)
        await self.server.start()
        self.starts += 1

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop()
            self.server = None
        if self.registry is not None:
            await self.registry.close()
            self.registry = None

    async def restart(self) -> None:
        await self.stop()
        await self.start()

    async def __aenter__(self) -> RestartableServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class ServerProcess:
    """``session-server serve`` in a subprocess; ``url`` is known after ``start()``."""

    def __init__(self, memory_dir: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.argv = [
            sys.executable,
            "-m",
            "session_server",
            "serve",
            "--port",
            "0",
            "--memory-dir",
            str(memory_dir),
            *args,
        ]
        self.env = {**os.environ, **(env or {})}
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ROOT), self.env.get("PYTHONPATH", "")) if p
        )
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.stdout_lines: list[str] = []
        self.stderr_text = ""
        self._stderr_thread: threading.Thread | None = None

    def start(self, timeout: float = 30.0) -> str:
        """Start and block until the address line is printed; return the URL."""
        self.proc = subprocess.Popen(
            self.argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=str(ROOT),
        )
        assert self.proc.stderr is not None
        stderr = self.proc.stderr
        chunks: list[str] = []

        def collect() -> None:
            for line in stderr:
                chunks.append(line)
            self.stderr_text = "".join(chunks)

        self._stderr_thread = threading.Thread(target=collect, daemon=True)
        self._stderr_thread.start()
        found = threading.Event()

        def read_address() -> None:
            assert self.proc is not None and self.proc.stdout is not None
            for line in self.proc.stdout:
                self.stdout_lines.append(line)
                match = _LISTENING.match(line)
                if match:
                    self.url = match.group(1)
                    found.set()
                    return

        reader = threading.Thread(target=read_address, daemon=True)
        reader.start()
        if not found.wait(timeout):
            self.kill()
            raise RuntimeError(f"server did not print its address: {self.stderr_text}")
        return self.url

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def terminate(self, timeout: float = 30.0, sig: int = signal.SIGTERM) -> int:
        """Send ``sig`` (SIGTERM), then wait for the exit code (killed after ``timeout``)."""
        assert self.proc is not None
        self.proc.send_signal(sig)
        return self.wait(timeout)

    def wait(self, timeout: float = 30.0) -> int:
        assert self.proc is not None
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise
        if self._stderr_thread is not None:
            self._stderr_thread.join(5)
        return code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


def turn_messages(n: int) -> list[ContextMessage]:
    """Turn ``n``: user question, assistant tool call, tool result, assistant answer."""
    call_id = f"call-{n}"
    return [
        ContextMessage(role="user", content=f"question {n}"),
        ContextMessage(
            role="assistant",
            content="",
            tool_calls=[ToolCall(id=call_id, name="lookup", arguments={"n": n})],
        ),
        ContextMessage(role="tool", content=f"result {n}", tool_call_id=call_id, name="lookup"),
        ContextMessage(role="assistant", content=f"answer {n}"),
    ]
