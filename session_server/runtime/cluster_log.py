"""``AgentLog``: one agent's turn log in cluster mode, a fenced JetStream append (I/O).

The store calls ``commit_point`` on its SQLite worker thread, inside the write
transaction, before ``COMMIT`` (``storage/turn_log.py``). The append is asyncio (nats-py):
the worker hands it to the event loop (``run_coroutine_threadsafe``) and waits for the
acknowledgement on that thread, so a write costs one thread hop (the one it already had)
and the loop never blocks; SQLite's write lock is held for the append's round trip,
which the write needs anyway (nothing commits before the log has it).

Each append carries ``Nats-Expected-Last-Subject-Sequence``: the sequence of this node's
last entry on the agent's subject (the owner marker it appended when it claimed the
agent, then each record). Another node that claimed the agent since has appended its own
marker, so the append is refused as stale (JetStream error 10071): the transaction rolls
back, the node drops the agent (``ClusterNode.fenced``) and the caller gets
``NotOwnerError``. An append whose outcome is unknown (a timeout) also rolls back; if
JetStream did store it, the next append is refused the same way and the node rebuilds
the agent from the log, where the record is (an idempotency key then replays it).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sqlite3
from pathlib import Path
from typing import Final, Protocol

from ..storage.turn_log import LogTarget, set_applied_seq
from ..values.errors import NotOwnerError, StorageError, UnavailableError
from ..values.turn_records import TurnRecord, encode_record

__all__ = ["AgentLog", "LogNode"]

READ_BATCH: Final = 512


class LogNode(Protocol):
    """What an ``AgentLog`` asks of its node (``ClusterNode``)."""

    @property
    def append_timeout(self) -> float: ...

    async def append(self, agent_log: AgentLog, payload: bytes) -> int: ...

    async def catch_up(self, agent_log: AgentLog, target: LogTarget) -> None: ...

    def fenced(self, agent_log: AgentLog, refused: bool) -> None: ...

    def not_owner(self, agent_id: str) -> NotOwnerError: ...

    def seal(self, agent_id: str, payload: bytes) -> bytes: ...

    async def rotate(self, agent_log: AgentLog) -> None: ...


class AgentLog:
    """The turn log of one agent this node owns (see the module doc)."""

    records: Final = True

    def __init__(
        self,
        node: LogNode,
        agent_id: str,
        subject: str,
        expected: int,
        generation: int,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.node = node
        self.agent_id = agent_id
        self.subject = subject
        # The sequence of this node's last entry on the subject: the next append expects it.
        self.expected = expected
        self.generation = generation
        self.fenced = False
        self.path: Path | None = None  # the agent file (snapshots read it)
        self.since_snapshot = 0
        self.bytes_since_snapshot = 0
        self._loop = loop

    async def attach(self, target: LogTarget) -> None:
        """Bring the agent file up to the log: replay the entries after its applied
        sequence, up to this node's marker (``ClusterNode.rebuild``)."""
        await self.node.catch_up(self, target)

    def commit_point(self, conn: sqlite3.Connection, record: TurnRecord) -> None:
        if self.fenced:
            raise self.node.not_owner(self.agent_id)
        payload = self.node.seal(self.agent_id, encode_record(record))
        future = asyncio.run_coroutine_threadsafe(self.node.append(self, payload), self._loop)
        try:
            seq = future.result(timeout=self.node.append_timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise UnavailableError(
                f"agent {self.agent_id!r}: the cluster's log did not acknowledge the write "
                f"within {self.node.append_timeout:g} s; nothing was committed here",
                data={"reason": "cluster_unavailable", "retryable": True},
            ) from None
        try:
            set_applied_seq(conn, seq)
        except sqlite3.Error as exc:
            raise StorageError(f"agent {self.agent_id!r}: applied sequence: {exc}") from exc

    async def erased(self) -> None:
        """A delete committed: rotate the agent's data key (``ClusterNode.rotate``)."""
        if not self.fenced:
            await self.node.rotate(self)

    def uncommitted(self) -> None:
        """The file missed a record the log has: drop the agent here (it is rebuilt
        from the log at its next open)."""
        self.fenced = True
        self._loop.call_soon_threadsafe(self.node.fenced, self, False)
