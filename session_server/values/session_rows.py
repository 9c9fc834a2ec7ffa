"""A session exactly as SQLite holds it: its row, its events, tool calls, idempotency keys (pure).

``SessionRows`` is the unit of a lossless export and import: every column of the
``sessions`` row except the mirror cursor (which describes the local mirror files, not
the session), and every row of ``events``, ``tool_calls`` and ``idempotency`` of the
session, verbatim (``metadata`` and ``strategy`` stay the JSON text SQLite stores, so
nothing is re-encoded on the way). ``check_rows`` validates rows that come from outside
(an import) before they are written; ``with_new_ids`` makes a copy under fresh ids.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import msgspec

from .agent_ids import unicode_id_problem
from .codec import hydrate_event, new_event_id
from .errors import CorruptRecordError, InvalidParamsError
from .events import ACTIONS
from .records import record_bound_problem
from .validation import MAX_TIMESTAMP_MS

__all__ = [
    "EventRow",
    "IdempotencyRow",
    "SessionRow",
    "SessionRows",
    "ToolCallRow",
    "check_rows",
    "columns",
    "with_new_ids",
]


class SessionRow(msgspec.Struct, forbid_unknown_fields=True):
    """The ``sessions`` row (``mirror_seq`` left out: it belongs to the local mirror)."""

    id: str
    agent_id: str
    created_at: int
    updated_at: int
    metadata: str | None
    last_seq: int
    last_turn: int
    last_turn_start_seq: int
    strategy: str | None
    compaction_required: int
    parent_session_id: str | None = None
    fork_seq: int | None = None
    fork_kind: str | None = None


class EventRow(msgspec.Struct, forbid_unknown_fields=True, tag="event", tag_field="kind"):
    """One ``events`` row, every column."""

    id: str
    session_id: str
    seq: int
    action: str
    content: str | None
    metadata: str | None
    created_at: int
    turn: int
    turn_start_seq: int
    token_count: int


class ToolCallRow(msgspec.Struct, forbid_unknown_fields=True, tag="tool_call", tag_field="kind"):
    """One ``tool_calls`` row (call id -> turn of the call)."""

    session_id: str
    call_id: str
    turn: int
    turn_start_seq: int


class IdempotencyRow(
    msgspec.Struct, forbid_unknown_fields=True, tag="idempotency", tag_field="kind"
):
    """One ``idempotency`` row: a retried write with this key answers ``result`` again."""

    session_id: str
    key: str
    result: str
    created_at: int


class SessionRows(msgspec.Struct):
    """Everything SQLite holds about one session (events oldest first)."""

    session: SessionRow
    events: list[EventRow] = msgspec.field(default_factory=list)
    tool_calls: list[ToolCallRow] = msgspec.field(default_factory=list)
    idempotency: list[IdempotencyRow] = msgspec.field(default_factory=list)


def columns(row_type: type[msgspec.Struct]) -> tuple[str, ...]:
    """The SQL column names of a row type, in declaration order."""
    return tuple(f.name for f in msgspec.structs.fields(row_type))


_MAX_SEQ: Final = 2**62


def _refuse(field: str, problem: str) -> InvalidParamsError:
    return InvalidParamsError(f"{field}: {problem}", data={"field": field})


def _check_time(field: str, stamp: int) -> None:
    if not 0 <= stamp <= MAX_TIMESTAMP_MS:
        raise _refuse(field, f"{stamp} is not a time in ms between 0 and {MAX_TIMESTAMP_MS}")


def check_rows(rows: SessionRows) -> None:
    """Refuse rows that would not read back as a valid session (``InvalidParamsError``).

    Every row belongs to the session; seqs are positive, unique, increasing and at most
    the session's ``last_seq``; turns at most ``last_turn``; timestamps are times in
    range; event ids are unique; every event decodes (its metadata is a JSON object with
    well-typed reference keys); every compaction record is one the builder applies and
    lies within the session (``record_bound_problem``: a boundary beyond the session's
    end would hide every later turn behind the record's summary); JSON columns are JSON
    objects.
    """
    session = rows.session
    for name, text in (
        ("session.metadata", session.metadata),
        ("session.strategy", session.strategy),
    ):
        if text is not None:
            try:
                value = msgspec.json.decode(text)
            except msgspec.DecodeError as exc:
                raise _refuse(name, f"not valid JSON ({exc})") from None
            if not isinstance(value, dict):
                raise _refuse(name, "must be a JSON object")
    if not 0 <= session.last_seq < _MAX_SEQ:
        raise _refuse("session.last_seq", f"out of range: {session.last_seq}")
    if not 0 <= session.last_turn < _MAX_SEQ:
        raise _refuse("session.last_turn", f"out of range: {session.last_turn}")
    if not 0 <= session.last_turn_start_seq <= session.last_seq:
        raise _refuse("session.last_turn_start_seq", f"out of range: {session.last_turn_start_seq}")
    for name, stamp in (("created_at", session.created_at), ("updated_at", session.updated_at)):
        _check_time(f"session.{name}", stamp)
    ids: set[str] = set()
    previous = 0
    for i, event in enumerate(rows.events):
        where = f"events[{i}]"
        if event.session_id != session.id:
            raise _refuse(f"{where}.session_id", f"{event.session_id!r} is not {session.id!r}")
        if event.action not in ACTIONS:
            raise _refuse(f"{where}.action", f"unknown action {event.action!r}")
        if not previous < event.seq <= session.last_seq:
            raise _refuse(
                f"{where}.seq",
                f"{event.seq} must be above {previous} and at most last_seq {session.last_seq}",
            )
        previous = event.seq
        if not event.id or event.id in ids:
            raise _refuse(f"{where}.id", f"empty or repeated event id {event.id!r}")
        if problem := unicode_id_problem(event.id):
            raise _refuse(f"{where}.id", problem)
        ids.add(event.id)
        _check_time(f"{where}.created_at", event.created_at)
        if not 0 <= event.turn <= session.last_turn:
            raise _refuse(
                f"{where}.turn", f"{event.turn} must be between 0 and last_turn {session.last_turn}"
            )
        if not 0 <= event.turn_start_seq <= event.seq:
            raise _refuse(f"{where}.turn_start_seq", f"{event.turn_start_seq} is out of range")
        if not 0 <= event.token_count < _MAX_SEQ:
            raise _refuse(f"{where}.token_count", f"{event.token_count} is out of range")
        try:
            hydrated = hydrate_event(msgspec.structs.asdict(event))
        except (CorruptRecordError, RecursionError) as exc:
            problem = exc.message if isinstance(exc, CorruptRecordError) else "nested too deeply"
            raise _refuse(f"{where}.metadata", problem) from None
        if event.action == "compaction":
            bound = (
                "holds no compaction record"
                if hydrated.compaction is None
                else record_bound_problem(hydrated.compaction, event.seq)
            )
            if bound:
                raise _refuse(f"{where}.metadata", bound)
    for i, call in enumerate(rows.tool_calls):
        if (
            not 0 <= call.turn <= session.last_turn
            or not 0 <= call.turn_start_seq <= session.last_seq
        ):
            raise _refuse(f"tool_calls[{i}].turn", "turn or turn_start_seq out of range")
    for i, kept in enumerate(rows.idempotency):
        _check_time(f"idempotency[{i}].created_at", kept.created_at)
    owners = [("tool_calls", i, r.session_id) for i, r in enumerate(rows.tool_calls)]
    owners += [("idempotency", i, r.session_id) for i, r in enumerate(rows.idempotency)]
    for name, i, owner in owners:
        if owner != session.id:
            raise _refuse(f"{name}[{i}].session_id", f"{owner!r} is not {session.id!r}")


def with_new_ids(
    rows: SessionRows,
    session_id: str,
    *,
    new_event_ids: bool = True,
    new_id: Callable[[], str] = new_event_id,
) -> SessionRows:
    """A copy of ``rows`` as session ``session_id``, with a fresh id for every event
    (``new_event_ids``; otherwise the event ids stay).

    Seqs, turns and everything else stay: seqs count within a session, so a copy in a new
    session keeps them, and the compaction records (which name seqs, never event ids)
    stay valid.
    """
    replace = msgspec.structs.replace
    return SessionRows(
        session=replace(rows.session, id=session_id),
        events=[
            replace(e, id=new_id() if new_event_ids else e.id, session_id=session_id)
            for e in rows.events
        ],
        tool_calls=[replace(t, session_id=session_id) for t in rows.tool_calls],
        idempotency=[replace(r, session_id=session_id) for r in rows.idempotency],
    )
