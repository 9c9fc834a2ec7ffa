"""Branches of a session as values: the answers of fork, rewind and branches, and the rule
that moves a rewind point inside a turn to the turn's start (pure).

A fork is a new session whose history is its source's up to ``fork_seq``; a rewind makes a
session continue from ``to_seq`` and (by default) keeps what it abandoned as a branch of
kind ``"rewind"``. See ``docs/branches.md``.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec

__all__ = [
    "BRANCH_KINDS",
    "Abandoned",
    "Branch",
    "BranchKind",
    "ForkResult",
    "RewindResult",
    "rewind_point",
]

BranchKind = Literal["fork", "rewind"]
BRANCH_KINDS: Final[tuple[str, ...]] = ("fork", "rewind")


class Branch(msgspec.Struct, frozen=True):
    """One session forked from another: its id, the parent's seq it starts after, its kind."""

    session_id: str
    fork_seq: int
    kind: BranchKind


class ForkResult(msgspec.Struct, frozen=True):
    """The answer of ``session.fork``."""

    session_id: str
    parent_session_id: str
    fork_seq: int
    last_seq: int


class Abandoned(msgspec.Struct, frozen=True):
    """The seqs a rewind took out of its session's history (``from_seq`` to ``to_seq``,
    both included; some may have been deleted before)."""

    from_seq: int
    to_seq: int


class RewindResult(msgspec.Struct, frozen=True):
    """The answer of ``session.rewind``.

    ``to_seq`` is where the session continues from: the requested seq, or the start of its
    turn when it fell inside one (``moved_to_turn_start``, with ``requested_to_seq``).
    ``abandoned`` is ``None`` when nothing followed ``to_seq``; ``branch_session_id`` is
    the branch holding the abandoned events (``None`` when erased or nothing abandoned).
    """

    session_id: str
    to_seq: int
    rewind_seq: int
    abandoned: Abandoned | None
    branch_session_id: str | None
    requested_to_seq: int
    moved_to_turn_start: bool
    erased: int = 0

    def to_builtins(self) -> dict[str, Any]:
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out


def rewind_point(to_seq: int, next_action: str | None, next_turn_start_seq: int) -> int:
    """Where a rewind to ``to_seq`` lands: ``to_seq`` itself at a turn boundary, else the
    seq just before the start of the turn ``to_seq`` is inside of, so that a turn is
    never split (a tool call is never kept without its results, or a user message
    without its answer).

    ``next_action``/``next_turn_start_seq``: the first non-compaction event after
    ``to_seq`` (``None`` when there is none). ``to_seq`` is at a boundary when nothing
    follows, when a user message (a new turn) follows, or when what follows belongs to
    no turn (``turn_start_seq`` 0: events before the first user message).
    """
    if to_seq < 0:
        raise ValueError(f"to_seq must be >= 0, not {to_seq}")
    if next_action is None or next_action == "user_message" or next_turn_start_seq <= 0:
        return to_seq
    return min(to_seq, next_turn_start_seq - 1)
