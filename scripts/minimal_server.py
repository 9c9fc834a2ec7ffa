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

Two parts of the contract are storage every ``turn.persist`` must write, and can be
turned on to measure what they cost at the least:

- ``contract=True``: in the same transaction, the request's idempotency key (its row in
  the store's ``idempotency`` table, with the answer and the request's digest, claimed
  with ``ON CONFLICT DO NOTHING``, and a replay answered from it, without the store's
  check that a retry asks for the same thing; pruned as the store does,
  ``prune_idempotency`` every ``PRUNE_EVERY_SEQS`` seqs of keyed writes) and the turn's
  tool calls (``tool_calls``, so a late result can join its call's turn).
- ``mirror_dir``: the JSONL mirror in the reference layout (``MirrorWriter``), written
  on a thread of its own after the answer, batched every 50 ms as ours is, with a
  ``working_context_snapshot.json`` at most once a second: the last 50 messages as they
  came (no context build, and no final one when the server stops).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from websockets.asyncio.server import ServerConnection, serve

from session_server.mirror_io.writer import MirrorWriter
from session_server.storage.idempotency import (
    CLAIM_KEY,
    DEFAULT_RETENTION,
    PRUNE_EVERY_SEQS,
    STORED_RESULT,
    columns_digest,
    prune_idempotency,
)
from session_server.storage.schema import SCHEMA_VERSION, schema_sql
from session_server.storage.sqlite_open import wal_autocheckpoint_pages
from session_server.storage.sqlite_ops import UPSERT_TOOL_CALL
from session_server.values.codec import dehydrate_event, message_to_event
from session_server.values.events import ContextMessage, SessionEvent
from session_server.values.tokens import get_counter

__all__ = [
    "INSERT_EVENT",
    "MINIMAL_AGENT",
    "MINIMAL_SESSION",
    "MinimalServer",
    "minimal_server",
    "open_turn_db",
]

MINIMAL_SESSION = "s"
"""The one session the minimal server writes to (every request's ``session_id`` is
ignored: it has no registry to look one up in)."""

MINIMAL_AGENT = "a"
"""The agent id of that session (its mirror folder's)."""

INSERT_EVENT = (
    "INSERT INTO events (id, session_id, seq, action, content, metadata, created_at, turn,"
    " turn_start_seq, token_count) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
"""One event row, in the store's schema."""

_MIRROR_DELAY_S = 0.05  # as ours (``MirrorLink.delay``)
_SNAPSHOT_INTERVAL_S = 1.0  # as ours (``MirrorLink.snapshot_interval``)
_SNAPSHOT_MESSAGES = 50  # the default window


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
        "INSERT INTO sessions (id, agent_id, created_at, updated_at) VALUES (?, ?, 0, 0)",
        (MINIMAL_SESSION, MINIMAL_AGENT),
    )
    return conn


class _Store:
    """One SQLite file and its position, written only on the worker thread."""

    def __init__(self, path: Path, synchronous: str, contract: bool, mirrored: bool) -> None:
        self.conn = open_turn_db(path, synchronous)
        self.counter = get_counter()
        self.contract = contract
        self.mirrored = mirrored  # the stored events are handed to the mirror
        self.seq = 0
        self.turn = 0

    def commit(self, events: list[SessionEvent], key: str | None) -> tuple[int, list[SessionEvent]]:
        """Store one turn; its last seq and, for the mirror, its stored events (none for
        a replay or without a mirror)."""
        self.turn += 1
        rows = []
        stored = []
        seq = self.seq
        now = int(time.time() * 1000)
        for event in events:
            seq += 1
            row = dehydrate_event(event)
            tokens = self.counter.count_event(event)
            rows.append(
                (row["id"], MINIMAL_SESSION, seq, row["action"], row["content"], row["metadata"],
                 now, self.turn, self.seq + 1, tokens)
            )  # fmt: skip
            if self.mirrored:
                stored.append(
                    msgspec.structs.replace(
                        event, seq=seq, turn=self.turn, timestamp=now, token_count=tokens
                    )
                )
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            if self.contract and key is not None:
                replayed = self._claim(key, events, [r[5] for r in rows], seq, now)
                if replayed is not None:
                    self.conn.execute("ROLLBACK")
                    self.turn -= 1
                    return replayed, []
            self.conn.executemany(INSERT_EVENT, rows)
            if self.contract:
                calls = [
                    (MINIMAL_SESSION, call.id, self.turn, self.seq + 1)
                    for event in events
                    for call in event.tool_calls or ()
                ]
                self.conn.executemany(UPSERT_TOOL_CALL, calls)
            self.conn.execute(
                "UPDATE sessions SET last_seq = ?, last_turn = ?, updated_at = ? WHERE id = ?",
                (seq, self.turn, now, MINIMAL_SESSION),
            )
            crossed = seq // PRUNE_EVERY_SEQS != self.seq // PRUNE_EVERY_SEQS
            if self.contract and key is not None and crossed:
                prune_idempotency(self.conn, MINIMAL_SESSION, now, DEFAULT_RETENTION)
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            self.turn -= 1
            raise
        self.seq = seq
        return seq, stored

    def _claim(
        self, key: str, events: list[SessionEvent], metadata: list[str | None], seq: int, now: int
    ) -> int | None:
        """Claim ``key`` with this turn's answer, as the store does; the last seq of the
        first answer when the key was taken already (a replay)."""
        digest = columns_digest(events, metadata, None)
        answer = {"seqs": list(range(self.seq + 1, seq + 1)), "last_seq": seq, "digest": digest}
        claimed = self.conn.execute(
            CLAIM_KEY, (MINIMAL_SESSION, key, msgspec.json.encode(answer).decode(), now)
        ).rowcount
        if claimed:
            return None
        (first,) = self.conn.execute(STORED_RESULT, (MINIMAL_SESSION, key)).fetchone()
        return int(msgspec.json.decode(first)["last_seq"])


class _Mirror:
    """The JSONL mirror of the one session: committed events held on the loop, written
    together every ``_MIRROR_DELAY_S`` on a thread of its own, in commit order, with the
    snapshot of the last messages at most every ``_SNAPSHOT_INTERVAL_S``."""

    def __init__(self, memory_dir: Path, executor: ThreadPoolExecutor) -> None:
        self.writer = MirrorWriter(memory_dir, MINIMAL_AGENT, enabled=True)
        self.executor = executor
        self.pending: list[SessionEvent] = []
        self.recent: collections.deque[ContextMessage] = collections.deque(
            maxlen=_SNAPSHOT_MESSAGES
        )
        self.timer: asyncio.TimerHandle | None = None
        self.snapshot_at = 0.0
        self.chain: asyncio.Future[None] | None = None

    def committed(self, stored: list[SessionEvent], messages: list[ContextMessage]) -> None:
        self.pending.extend(stored)
        self.recent.extend(messages)
        if self.timer is None:
            self.timer = asyncio.get_running_loop().call_later(_MIRROR_DELAY_S, self.flush)

    def flush(self) -> None:
        self.timer = None
        events, self.pending = self.pending, []
        snapshot = None
        now = time.monotonic()
        if events and now - self.snapshot_at >= _SNAPSHOT_INTERVAL_S:
            snapshot = (list(self.recent), events[-1].seq)
            self.snapshot_at = now
        # One write at a time, in order: each waits for the one before (a single thread).
        self.chain = asyncio.get_running_loop().run_in_executor(
            self.executor, self._write, events, snapshot
        )

    def _write(
        self, events: list[SessionEvent], snapshot: tuple[list[ContextMessage], int] | None
    ) -> None:
        if events:
            self.writer.append(MINIMAL_SESSION, events)
        if snapshot is not None:
            messages, last_seq = snapshot
            self.writer.write_snapshot(MINIMAL_SESSION, messages=messages, last_seq=last_seq)

    async def drain(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.flush()
        if self.chain is not None:
            await self.chain


@dataclass(frozen=True)
class MinimalServer:
    """A running minimal server: its ``ws://`` URL and its store."""

    url: str
    store: _Store

    def last_seq(self) -> int:
        """The seq of the last event it committed."""
        return self.store.seq


@contextlib.asynccontextmanager
async def minimal_server(
    path: Path, synchronous: str, *, contract: bool = False, mirror_dir: Path | None = None
) -> AsyncIterator[MinimalServer]:
    """Serve the minimal ``turn.persist`` (module doc) with its SQLite file at ``path``;
    ``contract``: with the idempotency and tool-call rows; ``mirror_dir``: with the JSONL
    mirror under that memory directory (written out before this returns)."""
    store = _Store(path, synchronous, contract, mirrored=mirror_dir is not None)
    decoder = msgspec.json.Decoder()
    encoder = msgspec.json.Encoder()
    loop = asyncio.get_running_loop()
    mirror_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="minimal-mirror")
    mirror = None if mirror_dir is None else _Mirror(mirror_dir, mirror_thread)

    async def handler(ws: ServerConnection) -> None:
        async for frame in ws:
            request: dict[str, Any] = decoder.decode(frame)
            params = request["params"]
            messages = [msgspec.convert(m, ContextMessage, strict=True) for m in params["messages"]]
            events = [message_to_event(MINIMAL_SESSION, m) for m in messages]
            key = params.get("idempotency_key")
            last_seq, stored = await loop.run_in_executor(writer, store.commit, events, key)
            answer = {"jsonrpc": "2.0", "id": request["id"], "result": {"last_seq": last_seq}}
            await ws.send(encoder.encode(answer), text=True)
            if mirror is not None and stored:
                mirror.committed(stored, messages)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="minimal-writer") as writer:
        try:
            async with serve(handler, "127.0.0.1", 0) as server:
                port = server.sockets[0].getsockname()[1]
                yield MinimalServer(f"ws://127.0.0.1:{port}", store)
            if mirror is not None:
                await mirror.drain()
        finally:
            mirror_thread.shutdown(wait=True)
            store.conn.close()
