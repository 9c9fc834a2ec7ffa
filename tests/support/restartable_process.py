"""``RestartableProcess``: a ``session-server serve`` subprocess that stops (SIGTERM or
SIGKILL) and starts again on the same port, for the clients' reconnection tests.

``await start()`` returns once the server printed its address (ready); ``await
stop(sig)`` signals it and waits for its exit; ``url`` stays the same throughout.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from tests.support.server import ServerProcess, free_port

__all__ = ["RestartableProcess"]


class RestartableProcess:
    def __init__(self, memory_dir: Path) -> None:
        self.memory_dir = memory_dir
        self.port = free_port()
        self.url = f"ws://127.0.0.1:{self.port}"
        self.proc: ServerProcess | None = None

    async def start(self) -> None:
        self.proc = ServerProcess(self.memory_dir, "--port", str(self.port))
        await asyncio.to_thread(self.proc.start)

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` without waiting for the exit."""
        assert self.proc is not None and self.proc.proc is not None
        self.proc.proc.send_signal(sig)

    async def stop(self, sig: int = signal.SIGTERM) -> None:
        proc = self.proc
        if proc is not None and proc.proc is not None and proc.proc.poll() is None:
            await asyncio.to_thread(proc.terminate, 30.0, sig)
        self.proc = None

    async def restart(self, sig: int) -> None:
        await self.stop(sig)
        await self.start()
