"""Transaction bodies of branches: fork, rewind, and a session's branches (I/O).

Each body runs inside one write transaction (``transactions.write_txn``), so a fork or a
rewind is wholly done or not at all, also after a SIGKILL at any moment. Both mark the
mirror of the sessions they change stale in the same transaction
(``sqlite_ops.invalidate_mirror``): the actor re-renders those folders right after the
commit, and an activation after a crash repairs them.

A fork copies no event: it writes its session row and its lineage (``values.lineage``:
the source's history up to the fork point, then its own rows), so its cost does not grow
with the history. A rewind moves no row either: the rewound session's lineage skips the
abandoned range, and its branch is a fork at the old head, whose lineage reads that
range where it is; ``erase`` erases the abandoned rows no other session reads
(``lineage_sql.collect``). Every reader of a session's events reads through its lineage
(``lineage_sql.events_source``).
"""

from __future__ import annotations

import sqlite3
from typing import Any, Final

from ..values.branches import (
    Abandoned,
    Branch,
    BranchKind,
    ForkResult,
    RewindResult,
    rewind_point,
)
from ..values.codec import now_ms
from ..values.errors import InvalidParamsError, NotFoundError
from ..values.lineage import fork_lineage, own_lineage, rewind_lineage
from .branch_blocks import copy_blocks, rewind_session_blocks
from .lineage_sql import collect, events_source, read_lineage, write_lineage
from .sqlite_ops import insert_session, invalidate_mirror

__all__ = ["fork_session", "list_branches", "rewind_session", "rewind_target"]

# A session's tool calls as its stored events say (the latest call of a reused id wins,
# as ``values.turns.number_turns`` says): the rows a late tool result looks up.
_DERIVE_CALLS: Final = (
    "INSERT INTO tool_calls (session_id, call_id, turn, turn_start_seq)"
    " SELECT ?1, json_extract(c.value, '$.id'), e.turn, e.turn_start_seq"
    " FROM events AS e, json_each(e.metadata, '$.toolCalls') AS c"
    " WHERE e.session_id = ?1 AND e.action = 'tool_call_request' AND e.seq <= ?2"
    " AND json_valid(e.metadata) AND json_type(c.value, '$.id') = 'text'"
    " {only} ORDER BY e.seq"
    " ON CONFLICT(session_id, call_id) DO UPDATE SET"
    " turn = excluded.turn, turn_start_seq = excluded.turn_start_seq"
)


def _turn_position(conn: sqlite3.Connection, session_id: str, up_to: int) -> tuple[int, int]:
    """The turn of the last user message at or before ``up_to`` (0, 0 without one), read
    through the session's lineage."""
    src, args = events_source(conn, session_id)
    row = conn.execute(
        f"SELECT turn, turn_start_seq, seq FROM {src} WHERE session_id = ? AND seq <= ?"
        " AND action = 'user_message' ORDER BY seq DESC LIMIT 1",
        (*args, session_id, up_to),
    ).fetchone()
    return (0, 0) if row is None else (int(row[0]), int(row[1]))


def _source_row(conn: sqlite3.Connection, session_id: str) -> sqlite3.Row:
    row = conn.execute(
        "SELECT last_seq, last_turn, last_turn_start_seq, strategy, compaction_required,"
        " metadata FROM sessions WHERE id = ?",
        (session_id,),
    ).fetchone()
    if row is None:
        raise NotFoundError.session(session_id)
    return row  # type: ignore[no-any-return]


def _new_fork(
    conn: sqlite3.Connection, agent_id: str, source_id: str, new_id: str, at_seq: int,
    metadata: str | None,
) -> None:  # fmt: skip
    """Create ``new_id`` reading ``source_id``'s history up to ``at_seq`` (no row copied)."""
    insert_session(conn, agent_id, new_id, None)
    conn.execute("UPDATE sessions SET metadata = ? WHERE id = ?", (metadata, new_id))
    write_lineage(
        conn, new_id, fork_lineage(source_id, read_lineage(conn, source_id), at_seq, new_id)
    )


def fork_session(
    conn: sqlite3.Connection,
    agent_id: str,
    source_id: str,
    new_id: str,
    at_seq: int | None,
    metadata: str | None,
    *,
    inherit_metadata: bool,
) -> ForkResult:
    """The body of ``session.fork``: ``new_id`` with ``source_id``'s history up to
    ``at_seq`` (default: its last seq). ``metadata``: the fork's (JSON text), or the
    source's when ``inherit_metadata``."""
    src = _source_row(conn, source_id)
    last_seq = int(src["last_seq"])
    at = last_seq if at_seq is None else at_seq
    if at < 0 or at > last_seq:
        raise InvalidParamsError(
            f"at_seq: must be between 0 and the session's last seq {last_seq}, not {at}",
            data={"field": "at_seq", "last_seq": last_seq},
        )
    _new_fork(
        conn, agent_id, source_id, new_id, at, src["metadata"] if inherit_metadata else metadata
    )
    copy_blocks(conn, source_id, new_id, at)  # its session blocks as they stood at ``at``
    turn, start = _turn_position(conn, new_id, at)
    flag = int(src["compaction_required"]) if at == last_seq else 0
    conn.execute(
        "UPDATE sessions SET last_seq = ?, last_turn = ?, last_turn_start_seq = ?,"
        " strategy = ?, compaction_required = ?, parent_session_id = ?, fork_seq = ?,"
        " fork_kind = 'fork' WHERE id = ?",
        (at, turn, start, src["strategy"], flag, source_id, at, new_id),
    )
    invalidate_mirror(conn, new_id)
    return ForkResult(session_id=new_id, parent_session_id=source_id, fork_seq=at, last_seq=at)


def rewind_target(conn: sqlite3.Connection, session_id: str, to_seq: int) -> int:
    """The seq a rewind of ``session_id`` to ``to_seq`` keeps the session up to: ``to_seq``,
    moved to its turn's start when inside one (``rewind_point``); checked against the
    session's last seq."""
    last_seq = int(_source_row(conn, session_id)["last_seq"])
    if to_seq < 0 or to_seq > last_seq:
        raise InvalidParamsError(
            f"to_seq: must be between 0 and the session's last seq {last_seq}, not {to_seq}",
            data={"field": "to_seq", "last_seq": last_seq},
        )
    src, args = events_source(conn, session_id)
    nxt = conn.execute(
        f"SELECT action, turn_start_seq, seq FROM {src} WHERE session_id = ? AND seq > ?"
        " AND action != 'compaction' ORDER BY seq LIMIT 1",
        (*args, session_id, to_seq),
    ).fetchone()
    return rewind_point(to_seq, None if nxt is None else nxt[0], 0 if nxt is None else nxt[1])


def rewind_session(
    conn: sqlite3.Connection,
    agent_id: str,
    session_id: str,
    to_seq: int,
    *,
    reason: str | None,
    erase: bool,
    branch_id: str,
) -> RewindResult:
    """The body of ``session.rewind``: ``session_id`` continues from ``to_seq`` (moved to
    its turn's start when inside one); one row in ``rewinds`` takes the next seq. The
    abandoned rows move to a new branch ``branch_id`` (a fork at ``to_seq`` whose own
    events are the abandoned ones), or are deleted with ``erase``."""
    src = _source_row(conn, session_id)
    last_seq = int(src["last_seq"])
    point = rewind_target(conn, session_id, to_seq)
    src_sql, src_args = events_source(conn, session_id)
    present = (
        conn.execute(
            f"SELECT 1 FROM {src_sql} WHERE session_id = ? AND seq > ? LIMIT 1",
            (*src_args, session_id, point),
        ).fetchone()
        is not None
    )
    abandoned = Abandoned(point + 1, last_seq) if point < last_seq else None
    branch: str | None = None
    erased = 0
    lineage = read_lineage(conn, session_id)
    rewind_seq = last_seq + 1
    if present and not erase:
        branch = branch_id
        _new_fork(conn, agent_id, session_id, branch, last_seq, src["metadata"])
        # the calls of the abandoned turns, which the branch reads and the session forgets
        conn.execute(
            "INSERT INTO tool_calls (session_id, call_id, turn, turn_start_seq)"
            " SELECT ?, call_id, turn, turn_start_seq FROM tool_calls"
            " WHERE session_id = ? AND turn_start_seq > ?",
            (branch, session_id, point),
        )
        copy_blocks(conn, session_id, branch, last_seq)  # the blocks as at the old head
        conn.execute(
            "UPDATE sessions SET last_seq = ?, last_turn = ?, last_turn_start_seq = ?,"
            " strategy = ?, compaction_required = ?, parent_session_id = ?, fork_seq = ?,"
            " fork_kind = 'rewind' WHERE id = ?",
            (last_seq, src["last_turn"], src["last_turn_start_seq"], src["strategy"],
             src["compaction_required"], session_id, point, branch),
        )  # fmt: skip
        invalidate_mirror(conn, branch)
    write_lineage(conn, session_id, rewind_lineage(session_id, lineage, point, rewind_seq))
    if present and erase:  # the abandoned rows no other session reads
        before = sum(
            int(conn.execute(
                "SELECT COUNT(*) FROM events WHERE session_id = ? AND seq BETWEEN ? AND ?",
                (seg.owner, max(seg.lo, point + 1), seg.hi),
            ).fetchone()[0])
            for seg in (lineage or own_lineage(session_id)) if seg.hi > point
        )  # fmt: skip
        owners = [seg.owner for seg in (lineage or own_lineage(session_id)) if seg.hi > point]
        collect(conn, owners, point + 1, last_seq)
        erased = before
    # The calls of abandoned turns go; an id reused from a kept turn points there again.
    gone = [
        r[0]
        for r in conn.execute(
            "DELETE FROM tool_calls WHERE session_id = ? AND turn_start_seq > ? RETURNING call_id",
            (session_id, point),
        )
    ]
    if gone:
        marks = ",".join("?" * len(gone))
        only = f"AND json_extract(c.value, '$.id') IN ({marks})"
        conn.execute(_DERIVE_CALLS.format(only=only), (session_id, point, *gone))
    rewind_session_blocks(conn, session_id, point, rewind_seq, erase=erase)
    turn, start = _turn_position(conn, session_id, point)
    now = now_ms()
    conn.execute(
        "INSERT INTO rewinds (session_id, seq, to_seq, abandoned_from, abandoned_to,"
        " branch_session_id, erased, reason, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (session_id, rewind_seq, point, point + 1, last_seq, branch, int(erase), reason, now),
    )
    conn.execute(
        "UPDATE sessions SET last_seq = ?, last_turn = ?, last_turn_start_seq = ?,"
        " compaction_required = 0, updated_at = ? WHERE id = ?",
        (rewind_seq, turn, start, now, session_id),
    )
    invalidate_mirror(conn, session_id)
    return RewindResult(
        session_id=session_id,
        to_seq=point,
        rewind_seq=rewind_seq,
        abandoned=abandoned,
        branch_session_id=branch,
        requested_to_seq=to_seq,
        moved_to_turn_start=point != to_seq,
        erased=erased,
    )


def list_branches(conn: sqlite3.Connection, session_id: str) -> list[Branch]:
    """The sessions forked from ``session_id`` (forks and rewind branches), oldest first."""
    if conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
        raise NotFoundError.session(session_id)
    rows: list[Any] = conn.execute(
        "SELECT id, fork_seq, fork_kind FROM sessions WHERE parent_session_id = ?"
        " ORDER BY created_at, id",
        (session_id,),
    ).fetchall()
    out: list[Branch] = []
    for r in rows:
        kind: BranchKind = "rewind" if r[2] == "rewind" else "fork"
        out.append(Branch(session_id=r[0], fork_seq=int(r[1] or 0), kind=kind))
    return out
