"""The append transaction bodies of one agent file, and the writes they share (I/O).

Each SQLite operation runs start to finish on a worker thread (see ``store``): a write is
one ``BEGIN IMMEDIATE`` ... ``COMMIT`` with every statement inside, so a turn costs one
thread hop instead of one per statement. Connections are in autocommit mode
(``isolation_level=None``); the functions manage transactions explicitly and roll back on
any failure, so a refused or failed write leaves nothing behind.

This module holds the append transaction bodies (``append``, ``append_group``) and the
writes they share with other bodies (a new session, a stale mirror). The rest is beside
it, each re-exported here under its old name: opening and migrating a file
(``sqlite_open``), the write transaction and its errors (``transactions``), rows read back
(``stored_rows``) and the idempotency of keyed writes (``idempotency``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from ..concurrency.worker_threads import WorkerThreads
from ..values.codec import encode_json, event_metadata, now_ms
from ..values.errors import ConflictError, NotFoundError, SessionServerError
from ..values.events import SessionEvent
from ..values.plans import AppendBatch, AppendOutcome, AppendResult
from ..values.tokens import count_events
from ..values.turns import TurnPosition, number_turns, stored_calls_needed
from .group_counts import GroupCounts
from .idempotency import (
    CLAIM_KEY,
    DEFAULT_RETENTION,
    PRUNE_EVERY_SEQS,
    STORED_RESULT,
    IdempotencyRetention,
    columns_digest,
    prune_idempotency,
    replayed_result,
)
from .lineage_sql import inherited_calls, release_id
from .stored_rows import (
    EVENT_COLUMNS,
)
from .stream_rows import end_stream
from .transactions import project_error
from .usage_rows import turn_usage

__all__ = [
    "STALE_MIRROR_SEQ",
    "UPSERT_TOOL_CALL",
    "append",
    "append_group",
    "insert_session",
    "invalidate_mirror",
]


UPSERT_TOOL_CALL: Final = (
    "INSERT INTO tool_calls (session_id, call_id, turn, turn_start_seq)"
    " VALUES (?, ?, ?, ?) ON CONFLICT(session_id, call_id) DO UPDATE SET"
    " turn = excluded.turn, turn_start_seq = excluded.turn_start_seq"
)
"""A tool call's turn (a reused call id points at its latest call)."""

# A delete writes this mirror cursor in its own transaction: never a session's last seq,
# so the next activation repairs the mirror even if the process dies before it does.
STALE_MIRROR_SEQ: Final = -1


def invalidate_mirror(conn: sqlite3.Connection, session_id: str) -> None:
    """Inside a delete's transaction: the mirror is stale and no snapshot is trusted.

    The checkpoint and file sizes go too, so nothing written before the delete can pass
    for current after a crash.
    """
    conn.execute(
        "UPDATE sessions SET mirror_seq = ?, mirror_state = NULL, mirror_files = NULL,"
        " snapshot_seq = 0, snapshot_digest = NULL WHERE id = ?",
        (STALE_MIRROR_SEQ, session_id),
    )


def insert_session(
    conn: sqlite3.Connection, agent_id: str, session_id: str, metadata: dict[str, Any] | None
) -> None:
    """Insert a session row; ``ConflictError`` when the id exists."""
    if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone():
        raise ConflictError(
            f"session_id: session {session_id!r} already exists", data={"field": "session_id"}
        )
    release_id(conn, session_id)  # rows a deleted session of that id left to its forks
    now = now_ms()
    conn.execute(
        "INSERT INTO sessions (id, agent_id, created_at, updated_at, metadata)"
        " VALUES (?, ?, ?, ?, ?)",
        (session_id, agent_id, now, now, None if metadata is None else encode_json(metadata)),
    )


def append(
    conn: sqlite3.Connection,
    batch: AppendBatch,
    retention: IdempotencyRetention = DEFAULT_RETENTION,
    counts: list[int] | None = None,
) -> AppendOutcome:
    """The body of an append transaction (run inside ``write_txn``).

    Returns the answer, the stored events (seq, turn, session_id filled in) and whether it
    was a replay of an earlier call with the same idempotency key (nothing written).
    ``counts``: the events' token counts when taken ahead (``GroupCounts``), else the
    batch's own or counted here.
    ``batch.create`` first creates the session in the same transaction, so a new session
    appears with all its events or not at all (imports).
    """
    session_id = batch.session_id
    if batch.create is not None:
        insert_session(conn, batch.create.agent_id, session_id, batch.create.metadata)
    row = conn.execute(
        "SELECT last_seq, last_turn, last_turn_start_seq, compaction_required, usage"
        " FROM sessions WHERE id = ?",
        (session_id,),
    ).fetchone()
    if row is None:
        raise NotFoundError.session(session_id)
    if batch.end_stream is not None:  # rolled back with the batch if it is refused
        end_stream(conn, session_id, batch.end_stream)
    last_seq = int(row[0])
    last = TurnPosition(int(row[1]), int(row[2]))
    # Each event's metadata column, once: the digest's and the stored row's (the fields
    # the append sets, seq, turn and session, are not part of it).
    events = batch.events
    metadata = [event_metadata(e) for e in events]
    now = now_ms()
    flag = bool(row[3]) if batch.compaction_required is None else batch.compaction_required
    seq = last_seq + len(events)
    result = AppendResult(
        seqs=list(range(last_seq + 1, seq + 1)), last_seq=seq, compaction_required=flag
    )
    key = batch.idempotency_key
    if key is not None:
        # The key's row first: it is written only when the key is new, so one statement
        # both claims the key and tells a replay (which then reads the first answer).
        # The request's digest is kept beside the result (same JSON column, so files
        # written before it existed read unchanged): a reuse of the key is a replay only
        # when the request is the same. Anything refused below rolls the row back.
        digest = columns_digest(events, metadata, batch.expected_last_seq)
        saved = {**msgspec.to_builtins(result), "digest": digest}
        claimed = conn.execute(CLAIM_KEY, (session_id, key, encode_json(saved), now)).rowcount
        if not claimed:
            prev = conn.execute(STORED_RESULT, (session_id, key)).fetchone()
            return AppendOutcome(replayed_result(prev[0], digest, session_id, key), [], replay=True)
    expected = batch.expected_last_seq
    if expected is not None and expected != last_seq:
        raise ConflictError(
            f"expected_last_seq: session {session_id!r} is at seq {last_seq}, not {expected}",
            data={"last_seq": last_seq, "field": "expected_last_seq"},
        )
    # Tool results join the turn of their call, even when the call came in an earlier
    # append: read the stored calls the numbering may look up, only those.
    wanted = stored_calls_needed(events)
    known: dict[str, TurnPosition] = {}
    if wanted:
        marks = ",".join("?" * len(wanted))
        for r in conn.execute(
            f"SELECT call_id, turn, turn_start_seq FROM tool_calls"
            f" WHERE session_id = ? AND call_id IN ({marks})",
            (session_id, *wanted),
        ):
            known[r[0]] = TurnPosition(int(r[1]), int(r[2]))
        if len(known) < len(wanted):  # a fork's calls made before it forked
            known.update(inherited_calls(conn, session_id, [c for c in wanted if c not in known]))
    positions, added = number_turns(events, first_seq=last_seq + 1, last=last, calls=known)
    stored: list[SessionEvent] = []
    rows_out: list[tuple[Any, ...]] = []
    if counts is None:
        counts = batch.token_counts
    if counts is None:  # counted here, off the event loop (tiktoken releases the GIL)
        counts = count_events(events)
    # The turn's usage rides on its last event and the session row (``usage_rows``).
    turn_text = session_usage = None
    if batch.usage is not None and events:
        at = events[-1].timestamp or now  # the turn's time: its last event's
        turn_text, session_usage = turn_usage(conn, session_id, row[4], batch.usage, at)
    rows = zip(events, metadata, counts, positions, strict=True)
    for ev_seq, (ev, meta, tokens, pos) in enumerate(rows, start=last_seq + 1):
        if ev.action == "user_message":
            last = pos
        created = ev.timestamp or now
        new = msgspec.structs.replace(
            ev, session_id=session_id, seq=ev_seq, timestamp=created, turn=pos.turn,
            token_count=tokens,
        )  # fmt: skip
        rows_out.append(
            (ev.id, session_id, ev_seq, ev.action, ev.content, meta, created,
             pos.turn, pos.start_seq, tokens, turn_text if ev_seq == seq else None)
        )  # fmt: skip
        stored.append(new)
    if rows_out:
        try:
            conn.executemany(
                f"INSERT INTO events ({EVENT_COLUMNS}, usage)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows_out,
            )
        except sqlite3.IntegrityError as exc:
            raise ConflictError(
                f"events: an event id already exists in this agent ({exc})",
                data={"field": "events[].id", "last_seq": last_seq},
            ) from exc
    if added:
        # A reused id points at its latest call, as ``number_turns`` says: later results
        # join the latest call's turn.
        conn.executemany(
            UPSERT_TOOL_CALL, [(session_id, cid, p.turn, p.start_seq) for cid, p in added.items()]
        )
    if rows_out or batch.compaction_required is not None:
        conn.execute(
            "UPDATE sessions SET last_seq = ?, last_turn = ?, last_turn_start_seq = ?,"
            " updated_at = ?, compaction_required = ?, mirror_seq = COALESCE(?, mirror_seq),"
            " usage = COALESCE(?, usage) WHERE id = ?",
            (seq, last.turn, last.start_seq, now, int(flag), batch.mirror_seq, session_usage,
             session_id),
        )  # fmt: skip
    if key is not None and seq // PRUNE_EVERY_SEQS != last_seq // PRUNE_EVERY_SEQS:
        prune_idempotency(conn, session_id, now, retention)
    return AppendOutcome(result, stored)


def append_group(
    conn: sqlite3.Connection,
    batches: Sequence[AppendBatch],
    retention: IdempotencyRetention = DEFAULT_RETENTION,
    count_executor: WorkerThreads | None = None,
) -> list[AppendOutcome | SessionServerError]:
    """The body of a group commit (run inside ``write_txn``): each batch in order, in its
    own savepoint, so a refused batch (conflict, unknown session, an id that exists)
    rolls back alone and the others commit with the seqs they would have had one after
    the other. A refused batch's error is returned in its place.

    When SQLite gave up the whole transaction (a hard I/O failure), the error is raised:
    nothing of the group is written and every caller gets it.

    ``count_executor``: a thread that takes the token counts of the later batches while
    the earlier ones are stored (``GroupCounts``); without it the writer counts them all.
    """
    out: list[AppendOutcome | SessionServerError] = []
    ahead = None
    if count_executor is not None and len(batches) > 1:
        ahead = GroupCounts(batches, count_executor)
    for i, batch in enumerate(batches):
        conn.execute("SAVEPOINT batch")
        try:
            outcome = append(conn, batch, retention, None if ahead is None else ahead.take(i))
        except Exception as exc:
            mapped = project_error(exc, "append_events")
            if not conn.in_transaction or not isinstance(mapped, SessionServerError):
                raise
            conn.execute("ROLLBACK TO batch")
            conn.execute("RELEASE batch")
            out.append(mapped)
            continue
        conn.execute("RELEASE batch")
        out.append(outcome)
    return out
