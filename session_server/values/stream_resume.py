"""Live turns: what a subscription that comes back owes its subscriber (pure).

A subscriber that resumes with ``stream_cursor`` was following the stream its cursor
falls in. When that stream ended while the subscriber was away (the turn was stored, or
the stream was abandoned or expired), its chunks are erased and no ``stream.closed``
would ever reach it: the resumed subscription sends the missed ``stream.closed`` (after
the stored events it replays), so a reply being shown as typing is always ended.
Cursors increase per session and are never reused, so the cursor alone says which
stream the subscriber was in.
"""

from __future__ import annotations

import msgspec

__all__ = ["EndedStream", "missed_close"]


class EndedStream(msgspec.Struct, frozen=True):
    """The last stream of a session that ended: its id, its cursors (``first_cursor`` is
    the cursor its first chunk had or would have had; ``last_cursor`` its last chunk's,
    ``first_cursor - 1`` when it had none) and whether its turn was stored."""

    stream_id: str
    first_cursor: int
    last_cursor: int
    persisted: bool

    def __post_init__(self) -> None:
        if self.first_cursor < 1 or self.last_cursor < self.first_cursor - 1:
            raise ValueError(
                f"cursors: first {self.first_cursor}, last {self.last_cursor} "
                "(first >= 1, last >= first - 1)"
            )


def missed_close(cursor: int | None, ended: EndedStream | None) -> bool:
    """Whether a subscription resumed after ``cursor`` (the last chunk its subscriber
    received; ``None``: a new subscriber, which wants only the stream in progress) owes
    the ``stream.closed`` of ``ended``: the cursor lies within that stream, or just before
    its first chunk (the subscriber had seen the stream before it end, and none of this
    one). A cursor past its last chunk belongs to a later stream."""
    if cursor is None or ended is None:
        return False
    return ended.first_cursor - 1 <= cursor <= ended.last_cursor
