"""Idempotency of keyed writes: retention, pruning, request digests, replays (I/O helpers).

A keyed write stores its result with the digest of its request; a write with the same
key is a replay of that result when it asks for the same thing, a ``ConflictError``
when it does not. Old keys are pruned in the write path (``IdempotencyRetention``).
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Sequence
from typing import Final

import msgspec

from ..values.codec import encode_json_bytes, event_metadata
from ..values.errors import ConflictError
from ..values.events import SessionEvent
from ..values.plans import AppendResult

__all__ = [
    "CLAIM_KEY",
    "DEFAULT_RETENTION",
    "PRUNE_EVERY_SEQS",
    "STORED_RESULT",
    "IdempotencyRetention",
    "columns_digest",
    "prune_idempotency",
    "replayed_result",
    "request_digest",
]

CLAIM_KEY: Final = (
    "INSERT INTO idempotency (session_id, key, result, created_at) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (session_id, key) DO NOTHING"
)
"""Claim a key with its write's result: one row written only when the key is new (its
``rowcount`` tells a replay)."""

STORED_RESULT: Final = "SELECT result FROM idempotency WHERE session_id = ? AND key = ?"
"""The result stored with a key (a replay answers it)."""


class IdempotencyRetention(msgspec.Struct, frozen=True):
    """How long the results of keyed writes are kept for replay.

    A key is kept while it is among the ``max_per_session`` newest of its session and
    younger than ``max_age_seconds``. Pruning runs in the write path, inside the keyed
    write's own transaction, each time a session's seq crosses a multiple of
    ``PRUNE_EVERY_SEQS`` (so a session holds at most ``max_per_session`` +
    ``PRUNE_EVERY_SEQS`` keys, and the cost is amortised over that many events). A retry
    after its key was pruned is a new write.
    """

    max_age_seconds: float = 86_400.0
    max_per_session: int = 1000

    def __post_init__(self) -> None:
        if not self.max_age_seconds > 0:
            raise ValueError(f"max_age_seconds: must be positive, got {self.max_age_seconds}")
        if self.max_per_session < 1:
            raise ValueError(f"max_per_session: must be at least 1, got {self.max_per_session}")


DEFAULT_RETENTION: Final = IdempotencyRetention()

# A prune reads and sorts every key of the session (about ``max_per_session``) and
# deletes keys scattered over the table's pages: done every 256 seqs, it costs a quarter of
# what it did every 64 (measured: 0.3-0.6 ms every 16 four-event turns), for at most 192
# keys more per session.
PRUNE_EVERY_SEQS: Final = 256


def prune_idempotency(
    conn: sqlite3.Connection, session_id: str, now: int, retention: IdempotencyRetention
) -> int:
    """Drop the keys of ``session_id`` beyond ``retention`` (``now`` in ms); the count."""
    cursor = conn.execute(
        "DELETE FROM idempotency WHERE session_id = :session AND (created_at < :before OR key IN ("
        " SELECT key FROM idempotency WHERE session_id = :session"
        " ORDER BY created_at DESC, key DESC LIMIT -1 OFFSET :keep))",
        {
            "session": session_id,
            "before": now - int(retention.max_age_seconds * 1000),
            "keep": retention.max_per_session,
        },
    )
    return int(cursor.rowcount)


def request_digest(events: Sequence[SessionEvent], expected_last_seq: int | None) -> str:
    """A digest of what a write asks for: each event's action, content and metadata (as
    stored) and the expected seq. Ids and timestamps are left out: a client retrying a
    persist does not resend them, the server makes fresh ones."""
    return columns_digest(events, [event_metadata(e) for e in events], expected_last_seq)


def columns_digest(
    events: Sequence[SessionEvent],
    metadata: Sequence[str | None],
    expected_last_seq: int | None,
) -> str:
    """``request_digest`` with each event's metadata column given (``append`` has them
    already): the SHA-256 of ``[expected_last_seq, [[action, content, metadata], ...]]``
    as compact JSON."""
    columns = [(e.action, e.content, m) for e, m in zip(events, metadata, strict=True)]
    return hashlib.sha256(encode_json_bytes([expected_last_seq, columns])).hexdigest()


def replayed_result(
    raw: str | bytes, digest: str | None, session_id: str, key: str
) -> AppendResult:
    """The stored result of an earlier write with ``key``, if it asked for the same thing."""
    saved = msgspec.json.decode(raw)
    stored_digest = saved.get("digest") if isinstance(saved, dict) else None
    if stored_digest is not None and stored_digest != digest:
        raise ConflictError(
            f"idempotency_key: {key!r} was already used in session {session_id!r} for a "
            "different request (a retry must send the same content)",
            data={"reason": "idempotency_mismatch", "field": "idempotency_key"},
        )
    return msgspec.convert(saved, AppendResult)
