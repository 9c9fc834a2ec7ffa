"""The values that cross the seams between the agent core, the actor and the store (pure).

``SessionState`` is a session row as the store hydrates it (JSON columns decoded once).
``AppendBatch`` is everything one append transaction needs, ``AppendOutcome`` what it
did; ``AppendResult`` is the public answer of an append or a persist. ``Effects`` is what
follows a commit, as data: the actor runs it (mirror, snapshot, subscribers).

Constructors check their arguments: a wrong type raises ``TypeError``, an impossible
value ``ValueError`` (these are programming errors of the caller, not requests to refuse).
"""

from __future__ import annotations

from copy import copy as _copy
from typing import Any

import msgspec

from .events import SessionEvent
from .records import CompactionRecord
from .usage import UsageTotals

__all__ = [
    "AppendBatch",
    "AppendOutcome",
    "AppendResult",
    "ContextWindow",
    "Effects",
    "NewSession",
    "SessionState",
    "SnapshotDue",
]


def _int(name: str, value: object, *, minimum: int = 0) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name}: must be an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{name}: must be >= {minimum}, got {value}")


def _opt_int(name: str, value: object) -> None:
    if value is not None:
        _int(name, value)


def _bool(name: str, value: object, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if not isinstance(value, bool):
        raise TypeError(f"{name}: must be a bool, got {type(value).__name__}")


class AppendResult(msgspec.Struct):
    """What an append wrote: the seqs of the new events, and the session's last seq."""

    seqs: list[int]
    last_seq: int
    compaction_required: bool = False
    # The turn's usage took its session or agent past a budget (``turn.persist`` only).
    budget_exceeded: bool = False


class SessionState(msgspec.Struct, frozen=True):
    """The internal columns of one session row (``strategy`` decoded from its JSON)."""

    session_id: str
    last_seq: int
    last_turn: int = 0
    compaction_required: bool = False
    mirror_seq: int = 0
    strategy: dict[str, Any] | None = None
    # The context snapshot SQLite vouches for: the seq it reflects and the SHA-256 of the
    # file's bytes (``None``: no snapshot is trusted, e.g. after a delete).
    snapshot_seq: int = 0
    snapshot_digest: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.session_id, str):
            raise TypeError("session_id: must be a str")
        _int("last_seq", self.last_seq)
        _int("last_turn", self.last_turn)
        _int("mirror_seq", self.mirror_seq, minimum=-1)  # -1: marked stale by a delete
        _int("snapshot_seq", self.snapshot_seq)
        if self.snapshot_digest is not None and not isinstance(self.snapshot_digest, str):
            raise TypeError("snapshot_digest: must be a str or None")
        _bool("compaction_required", self.compaction_required)
        if self.strategy is not None and not isinstance(self.strategy, dict):
            raise TypeError("strategy: must be a dict or None")


class ContextWindow(msgspec.Struct):
    """A context window read in one snapshot: its events (oldest first, tool-pair safe)
    and the session state they were read at."""

    events: list[SessionEvent]
    state: SessionState
    # Every event loaded (a complete run of the log up to last_seq, before the window was
    # cut), and whether it starts at the session's first event: the agent core caches it.
    suffix: list[SessionEvent] = msgspec.field(default_factory=list)
    complete: bool = False
    # The session's latest compaction record, if any.
    record: CompactionRecord | None = None


class NewSession(msgspec.Struct, frozen=True):
    """Create the session in the append's transaction (imports: all events or nothing)."""

    agent_id: str
    metadata: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.agent_id, str) or not self.agent_id:
            raise TypeError("agent_id: must be a non-empty str")
        if self.metadata is not None and not isinstance(self.metadata, dict):
            raise TypeError("metadata: must be a dict or None")


class AppendBatch(msgspec.Struct, frozen=True):
    """One append transaction: validated events (ids set) with their token counts.

    ``expected_last_seq`` refuses the batch when the session moved; a known
    ``idempotency_key`` replays the first answer; ``compaction_required`` sets the
    pressure flag (``None`` leaves it); ``mirror_seq`` stores the mirror cursor in the
    same transaction; ``create`` creates the session first; ``end_stream`` ends the
    session's live stream of that id in the same transaction (``stream.close {turn}``).
    """

    session_id: str
    events: list[SessionEvent] = msgspec.field(default_factory=list)
    # ``None``: counted when written (on the commit's worker thread), one per event.
    token_counts: list[int] | None = msgspec.field(default_factory=list)
    expected_last_seq: int | None = None
    idempotency_key: str | None = None
    compaction_required: bool | None = None
    mirror_seq: int | None = None
    create: NewSession | None = None
    end_stream: str | None = None
    # The provider's usage of the turn, stored with it (``storage.usage_rows``).
    usage: UsageTotals | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.session_id, str):
            raise TypeError("session_id: must be a str")
        if self.usage is not None and not isinstance(self.usage, UsageTotals):
            raise TypeError("usage: must be a UsageTotals or None")
        if self.token_counts is not None and len(self.events) != len(self.token_counts):
            raise ValueError(
                f"token_counts: {len(self.token_counts)} counts for {len(self.events)} events"
            )
        for event in self.events:
            if not isinstance(event, SessionEvent):
                raise TypeError("events: must be SessionEvent values")
            if not event.id:
                raise ValueError("events: every event needs an id before it is appended")
        _opt_int("expected_last_seq", self.expected_last_seq)
        _opt_int("mirror_seq", self.mirror_seq)
        _bool("compaction_required", self.compaction_required, optional=True)
        if self.idempotency_key is not None and not isinstance(self.idempotency_key, str):
            raise TypeError("idempotency_key: must be a str or None")
        if self.create is not None and not isinstance(self.create, NewSession):
            raise TypeError("create: must be a NewSession or None")

    def with_mirror_seq(self, mirror_seq: int) -> AppendBatch:
        """The same batch, also storing the mirror cursor ``mirror_seq``.

        A copy with that one field set: the rest was checked when the batch was made
        (``msgspec.structs.replace`` would run ``__post_init__`` over every event again,
        on the event loop, for each append of a mirrored session).
        """
        _opt_int("mirror_seq", mirror_seq)
        copy = _copy(self)
        msgspec.structs.force_setattr(copy, "mirror_seq", mirror_seq)
        return copy

    @property
    def writes_nothing(self) -> bool:
        """Nothing to write and nothing to check: the answer needs no transaction."""
        return (
            not self.events
            and self.compaction_required is None
            and self.idempotency_key is None
            and self.expected_last_seq is None
            and self.create is None
        )


class AppendOutcome(msgspec.Struct, frozen=True):
    """What the store did with an ``AppendBatch``: the answer, the events as stored
    (seq, turn, session id filled in) and whether it replayed an earlier answer."""

    result: AppendResult
    stored: list[SessionEvent]
    replay: bool = False


class SnapshotDue(msgspec.Struct, frozen=True):
    """Write the session's working-context snapshot with the next mirror batch."""

    session_id: str
    instructions: list[str]


class Effects(msgspec.Struct, frozen=True):
    """What follows one commit, in order: mirror lines, snapshot, subscriber calls."""

    session_id: str
    mirror: list[SessionEvent] = msgspec.field(default_factory=list)
    notify: list[SessionEvent] = msgspec.field(default_factory=list)
    snapshot: SnapshotDue | None = None
