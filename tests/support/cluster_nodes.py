"""Server nodes of a cluster as ``session-server serve --cluster`` subprocesses, and a
writer that does turns through the agent's owner, recording every acknowledged turn.

The writer finds the owner with ``cluster.owner`` (asked at any live node) and sends each
turn with an idempotency key; after a failure (the node gone, not the owner, the outcome
unknown) it finds the owner again and sends the same turn with the same key, so a turn
is acknowledged once whatever the faults.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from session_server.client import SessionClient
from session_server.values.errors import SessionServerError
from tests.support.nats_cluster import NatsCluster
from tests.support.server import ServerProcess

__all__ = ["ClusterNodes", "TurnWriter"]

LEASE_S: Final = 1.5
RETRY_DEADLINE_S: Final = 90.0
# A turn not answered within this is taken for lost (a frozen node keeps its sockets
# open): the writer looks for the owner again and resends the same key.
TURN_TIMEOUT_S: Final = 3.0


@dataclass
class ClusterNodes:
    """``count`` nodes on ``nats``, each with its own memory dir under ``root``."""

    nats: NatsCluster
    root: Path
    count: int = 3
    procs: dict[str, ServerProcess] = field(default_factory=dict)
    frozen: set[str] = field(default_factory=set)

    async def start(self) -> None:
        await asyncio.gather(*(self.start_node(f"node{i + 1}") for i in range(self.count)))

    @property
    def secret_file(self) -> Path:
        """The cluster secret every node is given (written on first use)."""
        path = self.root / "cluster-secret"
        if not path.exists():
            self.root.mkdir(parents=True, exist_ok=True)
            path.write_bytes(secrets.token_bytes(32).hex().encode())
            path.chmod(0o600)
        return path

    async def start_node(self, node_id: str) -> None:
        proc = ServerProcess(
            self.root / node_id,
            "--cluster",
            self.nats.url_arg,
            "--node-id",
            node_id,
            "--cluster-secret-file",
            str(self.secret_file),
            "--cluster-lease",
            str(LEASE_S),
        )
        await asyncio.to_thread(proc.start, 60.0)
        self.procs[node_id] = proc

    def alive(self) -> list[str]:
        return [
            n
            for n, p in self.procs.items()
            if p.proc is not None and p.proc.poll() is None and n not in self.frozen
        ]

    def url(self, node_id: str) -> str:
        return self.procs[node_id].url

    def kill(self, node_id: str) -> None:
        proc = self.procs[node_id]
        assert proc.proc is not None
        proc.proc.send_signal(signal.SIGKILL)
        proc.proc.wait()

    def freeze(self, node_id: str) -> None:
        proc = self.procs[node_id].proc
        assert proc is not None
        proc.send_signal(signal.SIGSTOP)
        self.frozen.add(node_id)

    def thaw(self, node_id: str) -> None:
        proc = self.procs[node_id].proc
        assert proc is not None
        proc.send_signal(signal.SIGCONT)
        self.frozen.discard(node_id)

    async def owner(self, agent_id: str) -> str:
        """The agent's live owner, asked at live nodes until one names a live node."""
        deadline = time.monotonic() + RETRY_DEADLINE_S
        while True:
            for node_id in self.alive():
                try:
                    async with SessionClient(
                        self.url(node_id), None, reconnect_budget=0.5, open_timeout=2.0
                    ) as client:
                        answer = await client.cluster_owner(agent_id)
                except (SessionServerError, OSError, TimeoutError):
                    continue
                if answer["node_id"] in self.alive():
                    return str(answer["node_id"])
            if time.monotonic() > deadline:
                raise AssertionError(f"no live owner of {agent_id!r} named")
            await asyncio.sleep(0.1)  # a poll interval while a lease lapses

    async def health(self, node_id: str) -> dict[str, Any]:
        async with SessionClient(self.url(node_id), None, reconnect_budget=1.0) as client:
            return await client.cluster_status()

    def stop(self) -> None:
        for node_id in list(self.frozen):
            self.thaw(node_id)
        running = [p for p in self.procs.values() if p.proc is not None and p.proc.poll() is None]
        for proc in running:
            assert proc.proc is not None
            proc.proc.send_signal(signal.SIGTERM)
        for proc in running:
            proc.wait(30.0)


@dataclass
class TurnWriter:
    """Turns ``turn-<n>`` into one session of ``agent_id``, through its owner."""

    nodes: ClusterNodes
    agent_id: str
    session_id: str = "s"
    acked: list[int] = field(default_factory=list)
    # Seconds from a failure to the next acknowledged turn, one per failover.
    gaps: list[float] = field(default_factory=list)
    _client: SessionClient | None = None
    _node: str | None = None

    async def _connect(self) -> SessionClient:
        if self._client is None:
            self._node = await self.nodes.owner(self.agent_id)
            client = SessionClient(
                self.nodes.url(self._node), self.agent_id, reconnect_budget=0.5, open_timeout=2.0
            )
            await client.connect()
            self._client = client
            await client.create_session(session_id=self.session_id, if_exists="return")
        return self._client

    async def _drop(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(SessionServerError, OSError, TimeoutError):
                await asyncio.wait_for(client.close(), 2.0)

    async def turn(self, n: int) -> None:
        """Turn ``n`` acknowledged once, retried through failovers."""
        deadline = time.monotonic() + RETRY_DEADLINE_S
        failed_at: float | None = None
        while True:
            try:
                client = await self._connect()
                await asyncio.wait_for(
                    client.persist_turn(
                        self.session_id,
                        [
                            {"role": "user", "content": f"question {n}"},
                            {"role": "assistant", "content": f"answer {n}"},
                        ],
                        idempotency_key=f"turn-{n}",
                    ),
                    TURN_TIMEOUT_S,
                )
            except (SessionServerError, OSError, TimeoutError, AssertionError):
                await self._drop()
                if failed_at is None:
                    failed_at = time.monotonic()
                if time.monotonic() > deadline:
                    raise
                continue
            if failed_at is not None:
                self.gaps.append(time.monotonic() - failed_at)
            self.acked.append(n)
            return

    async def turns(self, start: int, count: int) -> None:
        for n in range(start, start + count):
            await self.turn(n)

    async def stored(self) -> list[str]:
        """The session's contents at its owner, oldest first."""
        await self._drop()
        client = await self._connect()
        events = await client.load_events(self.session_id, limit=None)
        return [e.content for e in events]

    async def stored_through(self, node_id: str) -> list[str]:
        """The session's contents read through ``node_id`` (the owner, or a front door
        that forwards to it), oldest first."""
        async with SessionClient(
            self.nodes.url(node_id), self.agent_id, reconnect_budget=10.0
        ) as client:
            events = await client.load_events(self.session_id, limit=None)
        return [e.content for e in events]

    async def close(self) -> None:
        await self._drop()

    def expected(self) -> list[str]:
        out: list[str] = []
        for n in self.acked:
            out += [f"question {n}", f"answer {n}"]
        return out
