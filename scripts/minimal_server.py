"""The least a ``turn.persist`` server can do here, as a measured floor for ``bench_rpc``.

``minimal_server(path, synchronous)`` serves, on 127.0.0.1, a WebSocket endpoint that
answers each text frame the way a ``turn.persist`` must at the least: decode the JSON
(msgspec), validate each message (``msgspec.convert`` to ``ContextMessage``, strict),
give each a fresh event id, count its tokens (tiktoken), insert the 4 event rows and
update the session row in one ``BEGIN IMMEDIATE`` transaction on one worker thread (the
store's schema, WAL, the given ``synchronous``), then answer ``{"last_seq": ...}``.

It has none of the rest of session-server: no idempotency keys, turn numbering, tool-call
index, savepoints, recent-events cache, JSONL mirror, metrics, request budgets,
in-flight window, range checks, errors worded per field, authentication or agent
registry. It is the same Python, websockets, msgspec, tiktoken and sqlite3 on the same
event loop, so ``(m-x) / bound-x`` is what a sequential call can reach in this stack
with nothing but the required work: the limit the RPC target is measured against.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from websockets.asyncio.server import ServerConnection, serve

from session_server.core.codec import dehydrate_event, message_to_event
from session_server.core.events import ContextMessage, SessionEvent
from session_server.core.tokens import get_counter
from session_server.storage.schema import SCHEMA_VERSION, schema_sql
from session_server.storage.sqlite_open import wal_autocheckpoint_pages

__all__ = ["INSERT_EVENT", "MINIMAL_SESSION", "MinimalServer", "minimal_server", "open_turn_db"]

MINIMAL_SESSION = "s"
"""The one session the minimal server writes to (every request's ``session_id`` is
ignored: it has no registry to look one up in)."""

INSERT_EVENT = (
    "INSERT INTO events (id, session_id, seq, action, content, metadata, created_at, turn,"
    " turn_start_seq, token_count) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
"""One event row, in the store's schema."""


def open_turn_db(path: Path, synchronous: str) -> sqlite3.Connection:
    """A new SQLite file in the store's schema, WAL, at ``synchronous`` with the store's
    checkpoint interval, holding the session ``MINIMAL_SESSION`` (autocommit: callers
    write their own ``BEGIN IMMEDIATE`` ... ``COMMIT``)."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute(f"PRAGMA wal_autocheckpoint={wal_autocheckpoint_pages(synchronous)}")  # as ours
    conn.executescript(schema_sql())
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
    conn.execute(
        "INSERT INTO sessions (id, agent_id, created_at, updated_at) VALUES (?, 'a', 0, 0)",
        (MINIMAL_SESSION,),
    )
    return conn


class _Store:
    """One SQLite file and its position, written only on the worker thread."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self.conn = open_turn_db(path, synchronous)
        self.counter = get_counter()
        self.seq = 0
        self.turn = 0

    def commit(self, events: list[SessionEvent]) -> int:
        self.turn += 1
        rows = []
        seq = self.seq
        for event in events:
            seq += 1
            row = dehydrate_event(event)
            rows.append(
                (row["id"], MINIMAL_SESSION, seq, row["action"], row["content"], row["metadata"],
                 row["created_at"], self.turn, seq, self.counter.count_event(event))
            )  # fmt: skip
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.executemany(INSERT_EVENT, rows)
        self.conn.execute(
            "UPDATE sessions SET last_seq = ?, last_turn = ?, updated_at = ? WHERE id = ?",
            (seq, self.turn, self.turn, MINIMAL_SESSION),
        )
        self.conn.execute("COMMIT")
        self.seq = seq
        return seq


@dataclass(frozen=True)
class MinimalServer:
    """A running minimal server: its ``ws://`` URL and its store."""

    url: str
    store: _Store

    def last_seq(self) -> int:
        """The seq of the last event it committed."""
        return self.store.seq


@contextlib.asynccontextmanager
async def minimal_server(path: Path, synchronous: str) -> AsyncIterator[MinimalServer]:
    """Serve the minimal ``turn.persist`` (module doc) with its SQLite file at ``path``."""
    store = _Store(path, synchronous)
    decoder = msgspec.json.Decoder()
    encoder = msgspec.json.Encoder()
    loop = asyncio.get_running_loop()

    async def handler(ws: ServerConnection) -> None:
        async for frame in ws:
            request: dict[str, Any] = decoder.decode(frame)
            messages = [
                msgspec.convert(m, ContextMessage, strict=True)
                for m in request["params"]["messages"]
            ]
            events = [message_to_event(MINIMAL_SESSION, m) for m in messages]
            last_seq = await loop.run_in_executor(writer, store.commit, events)
            answer = {"jsonrpc": "2.0", "id": request["id"], "result": {"last_seq": last_seq}}
            await ws.send(encoder.encode(answer), text=True)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="minimal-writer") as writer:
        try:
            async with serve(handler, "127.0.0.1", 0) as server:
                port = server.sockets[0].getsockname()[1]
                yield MinimalServer(f"ws://127.0.0.1:{port}", store)
        finally:
            store.conn.close()
