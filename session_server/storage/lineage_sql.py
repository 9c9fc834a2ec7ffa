"""Lineage in SQLite: where a session's rows are, which stored rows are still read (I/O).

The ``lineage`` table holds the segments of the sessions that have one
(``values.lineage``); a session without rows there reads its own rows, with the same
query as before lineage existed. ``events_source`` is what every reader of a session's
events selects from: ``events`` itself, or a ``UNION ALL`` of one indexed range per
segment (SQLite merges the arms in seq order through ``idx_events_session_seq``, so an
``ORDER BY seq ... LIMIT`` reads only the rows it returns). Each arm answers the reading
session's id as ``session_id``, so the callers' ``WHERE session_id = ?`` stays as it is.

``still_read`` answers "which rows of a session are still needed", for deletes,
retention and rewinds; ``collect`` erases the rows no session reads any more.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterable, Sequence
from typing import Any, Final

from ..values.codec import new_event_id
from ..values.lineage import OPEN, Segment, hide, merge_ranges, repoint, uncovered
from ..values.turns import TurnPosition

__all__ = [
    "SearchScope",
    "clear_session_rows",
    "collect",
    "count_in_view",
    "delete_from_view",
    "delete_session_rows",
    "events_source",
    "has_lineage",
    "inherited_calls",
    "private_row",
    "read_lineage",
    "reader_of",
    "release_id",
    "search_scope",
    "select_ordered",
    "shares_rows",
    "source_for",
    "still_read",
    "write_lineage",
]

_ARM: Final = (
    "SELECT id, ? AS session_id, seq, action, content, metadata, created_at,"
    " turn, turn_start_seq, token_count FROM events WHERE session_id = ? AND seq BETWEEN ? AND ?"
)

# ``EVENT_COLUMNS`` of one segment's rows, the reading session's id as theirs
_ARM_EVENTS: Final = (
    "SELECT id, ? AS session_id, seq, action, content, metadata, created_at, turn,"
    " turn_start_seq, token_count FROM events WHERE session_id = ? AND seq BETWEEN ? AND ?"
)


def read_lineage(conn: sqlite3.Connection, session_id: str) -> list[Segment] | None:
    """The session's segments in seq order, ``None`` when it has none (it reads its own
    rows)."""
    rows = conn.execute(
        "SELECT lo, hi, owner FROM lineage WHERE session_id = ? ORDER BY lo", (session_id,)
    ).fetchall()
    return [Segment(int(r[0]), int(r[1]), str(r[2])) for r in rows] or None


def has_lineage(conn: sqlite3.Connection, session_id: str) -> bool:
    return (
        conn.execute("SELECT 1 FROM lineage WHERE session_id = ? LIMIT 1", (session_id,)).fetchone()
        is not None
    )


def write_lineage(
    conn: sqlite3.Connection, session_id: str, segments: Sequence[Segment] | None
) -> None:
    """Replace the session's segments (``None``: it reads its own rows again)."""
    conn.execute("DELETE FROM lineage WHERE session_id = ?", (session_id,))
    if segments:
        conn.executemany(
            "INSERT INTO lineage (session_id, lo, hi, owner) VALUES (?, ?, ?, ?)",
            [(session_id, s.lo, s.hi, s.owner) for s in segments],
        )


def events_source(conn: sqlite3.Connection, session_id: str) -> tuple[str, tuple[Any, ...]]:
    """What to select a session's events from, and its arguments (they come before the
    caller's): ``events`` for a session without lineage, else one arm per segment.

    A query over it with ``ORDER BY seq`` must select ``seq``: only then can SQLite
    flatten it into a merge of the arms in index order (else it sorts every row)."""
    return source_for(session_id, read_lineage(conn, session_id))


def source_for(session_id: str, lineage: Sequence[Segment] | None) -> tuple[str, tuple[Any, ...]]:
    """``events_source`` of a lineage already read."""
    if lineage is None:
        return "events", ()
    args: list[Any] = []
    for seg in lineage:
        args.extend((session_id, seg.owner, seg.lo, seg.hi))
    return "(" + " UNION ALL ".join([_ARM] * len(lineage)) + ")", tuple(args)


def _readers(conn: sqlite3.Connection, owner: str) -> list[tuple[str, int, int]]:
    """Who reads ``owner``'s rows: ``(session, lo, hi)`` per segment, and the owner itself
    over every seq while it is a session without lineage."""
    out = [
        (str(r[0]), int(r[1]), int(r[2]))
        for r in conn.execute(
            "SELECT session_id, lo, hi FROM lineage WHERE owner = ? ORDER BY lo", (owner,)
        )
    ]
    root = conn.execute("SELECT 1 FROM sessions WHERE id = ?", (owner,)).fetchone()
    if root is not None and not has_lineage(conn, owner):
        out.append((owner, 0, OPEN))
    return out


def still_read(
    conn: sqlite3.Connection, owner: str, *, besides: str | None = None
) -> list[tuple[int, int]]:
    """The seq ranges of ``owner``'s stored rows some session still reads (``besides``:
    a session not counted, e.g. the one deleting them)."""
    return merge_ranges((lo, hi) for s, lo, hi in _readers(conn, owner) if s != besides)


def reader_of(conn: sqlite3.Connection, owner: str, seq: int) -> str | None:
    """The session a stored row is reported under: its owner while the owner reads it,
    else the oldest session whose lineage reads it (``None``: nobody)."""
    found: str | None = None
    for s, lo, hi in _readers(conn, owner):
        if lo <= seq <= hi:
            if s == owner:
                return s
            found = found or s
    return found


def collect(conn: sqlite3.Connection, owners: Iterable[str], lo: int = 0, hi: int = OPEN) -> int:
    """Erase the rows of ``owners`` within ``[lo, hi]`` that no session reads any more;
    how many went."""
    gone = 0
    for owner in dict.fromkeys(owners):
        for a, b in uncovered(still_read(conn, owner), lo, hi):
            gone += conn.execute(
                "DELETE FROM events WHERE session_id = ? AND seq BETWEEN ? AND ?", (owner, a, b)
            ).rowcount
    return gone


def release_id(conn: sqlite3.Connection, session_id: str) -> None:
    """Before a session is created under ``session_id``: rows a deleted session of that id
    left for its forks move to a held id of their own (the forks' segments follow), so
    the new session starts empty and its seqs never meet theirs."""
    if (
        conn.execute("SELECT 1 FROM events WHERE session_id = ? LIMIT 1", (session_id,)).fetchone()
        is None
    ):
        return
    held = f"~held~{uuid.uuid4()}"
    conn.execute("UPDATE events SET session_id = ? WHERE session_id = ?", (held, session_id))
    conn.execute("UPDATE lineage SET owner = ? WHERE owner = ?", (held, session_id))


def inherited_calls(
    conn: sqlite3.Connection, session_id: str, call_ids: Sequence[str]
) -> dict[str, TurnPosition]:
    """The turns of tool calls ``session_id`` reads through its lineage (a fork's calls
    made before it forked), newest segment first: what a late tool result joins. A call
    id its owner reused after the segment's end is found by its stored events."""
    lineage = read_lineage(conn, session_id)
    found: dict[str, TurnPosition] = {}
    for seg in reversed(lineage or []):
        if seg.owner == session_id:
            continue
        wanted = [c for c in call_ids if c not in found]
        if not wanted:
            break
        marks = ",".join("?" * len(wanted))
        for r in conn.execute(  # the owner's own index of its calls, when it still applies
            "SELECT call_id, turn, turn_start_seq FROM tool_calls WHERE session_id = ?"
            f" AND call_id IN ({marks}) AND turn_start_seq BETWEEN ? AND ?",
            (seg.owner, *wanted, max(seg.lo, 1), seg.hi),
        ):
            found[str(r[0])] = TurnPosition(int(r[1]), int(r[2]))
        wanted = [c for c in wanted if c not in found]
        if not wanted:
            break
        marks = ",".join("?" * len(wanted))
        for r in conn.execute(
            "SELECT json_extract(c.value, '$.id'), e.turn, e.turn_start_seq"
            " FROM events AS e, json_each(e.metadata, '$.toolCalls') AS c"
            " WHERE e.session_id = ? AND e.seq BETWEEN ? AND ?"
            " AND e.action = 'tool_call_request' AND json_valid(e.metadata)"
            f" AND json_extract(c.value, '$.id') IN ({marks}) ORDER BY e.seq",
            (seg.owner, seg.lo, seg.hi, *wanted),
        ):
            found[str(r[0])] = TurnPosition(int(r[1]), int(r[2]))  # the latest wins
    return found


class SearchScope:
    """Where a search looks and under which sessions its hits are reported: a stored row
    once per requested session that reads it (``sessions`` given), else once, under the
    session ``reader_of`` names (its owner while the owner reads it)."""

    def __init__(self, conn: sqlite3.Connection, sessions: Sequence[str] | None) -> None:
        self._conn = conn
        self._sessions = None if sessions is None else tuple(dict.fromkeys(sessions))
        self._readers: dict[str, list[tuple[str, int, int]]] = {}

    def where(self, args: list[Any]) -> str:
        """The condition on ``e`` (the events row) for the requested sessions."""
        if self._sessions is None:
            return ""
        parts: list[str] = []
        for sid in self._sessions:
            lineage = read_lineage(self._conn, sid)
            if lineage is None:
                parts.append("e.session_id = ?")
                args.append(sid)
                continue
            for seg in lineage:
                parts.append("(e.session_id = ? AND e.seq BETWEEN ? AND ?)")
                args.extend((seg.owner, seg.lo, seg.hi))
        return " AND (" + " OR ".join(parts) + ")"

    def report_as(self, owner: str, seq: int) -> list[str]:
        """The sessions a hit on ``owner``'s row at ``seq`` is reported under."""
        if owner not in self._readers:
            self._readers[owner] = _readers(self._conn, owner)
        readers = [s for s, lo, hi in self._readers[owner] if lo <= seq <= hi]
        if self._sessions is not None:
            return [s for s in self._sessions if s in readers]
        if owner in readers:
            return [owner]
        return readers[:1]


def search_scope(conn: sqlite3.Connection, sessions: Sequence[str] | None) -> SearchScope:
    return SearchScope(conn, sessions)


def _shared(conn: sqlite3.Connection, session_id: str) -> bool:
    """Whether another session reads some of ``session_id``'s rows."""
    return (
        conn.execute(
            "SELECT 1 FROM lineage WHERE owner = ? AND session_id != ? LIMIT 1",
            (session_id, session_id),
        ).fetchone()
        is not None
    )


def delete_session_rows(conn: sqlite3.Connection, session_id: str) -> int:
    """The event rows of a deleted session (its ``sessions`` row already gone) erased,
    except those its forks still read, which stay, under its id, until the last such fork
    goes; the rows of its ancestors that only it read go too. How many went."""
    lineage = read_lineage(conn, session_id)
    if lineage is None and not _shared(conn, session_id):  # the common case, as before
        return conn.execute("DELETE FROM events WHERE session_id = ?", (session_id,)).rowcount
    write_lineage(conn, session_id, None)
    return collect(conn, [session_id, *(s.owner for s in lineage or ())])


def clear_session_rows(conn: sqlite3.Connection, session_id: str, last_seq: int) -> int:
    """Every event of the session leaves it (its next seq stays ``last_seq + 1``): rows no
    other session reads are erased. How many events it had."""
    lineage = read_lineage(conn, session_id)
    if lineage is None and not _shared(conn, session_id):
        return conn.execute("DELETE FROM events WHERE session_id = ?", (session_id,)).rowcount
    count = count_in_view(conn, session_id, "COUNT(*)", "1", ())
    write_lineage(conn, session_id, [Segment(last_seq + 1, OPEN, session_id)])
    collect(conn, [session_id, *(s.owner for s in lineage or ())])
    return count


def delete_from_view(conn: sqlite3.Connection, session_id: str, event_ids: Sequence[str]) -> int:
    """``events.delete``: the events of ``session_id``'s history with these ids leave it.
    A row no other session reads is erased; a row another session reads (a fork's
    inherited prefix, the parent's rows a fork shares) stays for it, and only this
    session's lineage stops reading it. How many events left the session."""
    if not event_ids:
        return 0
    marks = ",".join("?" * len(event_ids))
    lineage = read_lineage(conn, session_id)
    if lineage is None and not _shared(conn, session_id):  # the common case, as before
        return conn.execute(
            f"DELETE FROM events WHERE session_id = ? AND id IN ({marks})",
            (session_id, *event_ids),
        ).rowcount
    found: list[tuple[str, int]] = []
    for seg in lineage or [Segment(0, OPEN, session_id)]:
        found.extend(
            (seg.owner, int(r[0]))
            for r in conn.execute(
                "SELECT seq FROM events WHERE session_id = ? AND seq BETWEEN ? AND ?"
                f" AND id IN ({marks})",
                (seg.owner, seg.lo, seg.hi, *event_ids),
            )
        )
    if not found:
        return 0
    others = {o: still_read(conn, o, besides=session_id) for o in {o for o, _ in found}}
    hidden = [
        seq
        for owner, seq in found
        if owner != session_id or any(lo <= seq <= hi for lo, hi in others[owner])
    ]
    if hidden:  # rows another session still reads: this one stops reading them
        write_lineage(conn, session_id, hide(session_id, lineage, hidden))
    for owner, seq in found:
        if owner == session_id and seq not in hidden:  # its own row, read by nobody else
            conn.execute("DELETE FROM events WHERE session_id = ? AND seq = ?", (owner, seq))
        else:
            collect(conn, [owner], seq, seq)
    return len(found)


def shares_rows(conn: sqlite3.Connection, session_id: str) -> bool:
    """Whether another session reads some of ``session_id``'s rows."""
    return _shared(conn, session_id)


def private_row(conn: sqlite3.Connection, session_id: str, seq: int) -> str:
    """Before ``session_id`` rewrites its event at ``seq`` in place while other sessions
    read that row: the others keep the row as it is (moved to a held id when this
    session owns it), this session gets a copy of its own under a new event id. Answers
    the id of the row to rewrite."""
    lineage = read_lineage(conn, session_id)
    owner = next(
        (g.owner for g in lineage or () if g.lo <= seq <= g.hi),
        session_id,
    )
    others = [(x, lo, hi) for x, lo, hi in _readers(conn, owner) if x != session_id]
    old_id = conn.execute(
        "SELECT id FROM events WHERE session_id = ? AND seq = ?", (owner, seq)
    ).fetchone()[0]
    if not any(lo <= seq <= hi for _, lo, hi in others) and owner == session_id:
        return str(old_id)
    source = owner
    if owner == session_id:  # the others' old row moves aside, under a held id
        source = f"~held~{uuid.uuid4()}"
        conn.execute(
            "UPDATE events SET session_id = ? WHERE session_id = ? AND seq = ?",
            (source, owner, seq),
        )
        for reader in {x for x, lo, hi in others if lo <= seq <= hi}:
            write_lineage(conn, reader, repoint(read_lineage(conn, reader) or [], seq, source))
    new_id = new_event_id()
    conn.execute(
        "INSERT INTO events (id, session_id, seq, action, content, metadata, created_at, turn,"
        " turn_start_seq, token_count) SELECT ?, ?, seq, action, content, metadata,"
        " created_at, turn, turn_start_seq, token_count FROM events"
        " WHERE session_id = ? AND seq = ?",
        (new_id, session_id, source, seq),
    )
    if lineage is not None:
        write_lineage(conn, session_id, repoint(lineage, seq, session_id))
    if owner != session_id:
        collect(conn, [owner], seq, seq)
    return new_id


def select_ordered(
    conn: sqlite3.Connection,
    session_id: str,
    lineage: Sequence[Segment],
    where: str,
    args: Sequence[Any],
    *,
    desc: bool,
    limit: int | None,
) -> list[Any]:
    """The rows (``EVENT_COLUMNS``) of ``session_id``'s history matching ``where`` (a
    condition on ``events`` columns, no session term), in seq order (``desc``: newest
    first), at most ``limit``: one indexed range per segment, newest segment first when
    ``desc``, stopping once enough rows came. The window read of a build takes this path
    rather than ``events_source``'s ``UNION ALL``, whose merge handles every row once
    per level of its tree of arms."""
    order = "DESC" if desc else "ASC"
    out: list[Any] = []
    for seg in reversed(lineage) if desc else lineage:
        left = None if limit is None else limit - len(out)
        if left is not None and left <= 0:
            break
        out.extend(
            conn.execute(
                f"{_ARM_EVENTS} AND {where} ORDER BY seq {order}"
                + ("" if left is None else f" LIMIT {int(left)}"),
                (session_id, seg.owner, seg.lo, seg.hi, *args),
            ).fetchall()
        )
    return out


def count_in_view(
    conn: sqlite3.Connection, session_id: str, what: str, where: str, args: Sequence[Any]
) -> int:
    """``SELECT {what} FROM events WHERE session_id = ? AND {where}`` summed over the
    session's history (``what``: an aggregate whose sum over parts is the whole, a
    ``COUNT`` or a ``SUM``), one indexed range per segment: an aggregate over
    ``events_source``'s ``UNION ALL`` would copy every row of the history first."""
    lineage = read_lineage(conn, session_id)
    if lineage is None:  # the query of a session without lineage, as before
        return int(
            conn.execute(
                f"SELECT COALESCE({what}, 0) FROM events WHERE session_id = ? AND {where}",
                (session_id, *args),
            ).fetchone()[0]
        )
    parts = [(seg.owner, seg.lo, seg.hi) for seg in lineage]
    return sum(
        int(
            conn.execute(
                f"SELECT COALESCE({what}, 0) FROM events WHERE session_id = ?"
                f" AND seq BETWEEN ? AND ? AND {where}",
                (owner, lo, hi, *args),
            ).fetchone()[0]
        )
        for owner, lo, hi in parts
    )
