"""When each session's end-of-turn snapshot is rendered (pure: the caller gives the time).

``SnapshotSchedule`` keeps the latest due snapshot of each session and when each was last
rendered. A session's snapshot is rendered at most once per ``interval``, and at most
once per ``read_interval`` when it had to be read from the file (the cache did not hold
its window: a read costs far more than a render from the cache). ``take`` says which
dues to render now and when the first held one is due; the shell (``MirrorLink``) sets
its timer from that and does the rendering and the I/O.
"""

from __future__ import annotations

from ..values.plans import SnapshotDue

__all__ = ["SnapshotSchedule"]


class SnapshotSchedule:
    """The snapshots waiting to be rendered and the pace of each session's renders."""

    def __init__(self, interval: float = 1.0, read_interval: float = 5.0) -> None:
        self.interval = interval
        self.read_interval = read_interval
        self._due: dict[str, SnapshotDue] = {}  # the latest one of each session
        # When each session's snapshot was last rendered, and whether it was read from
        # the file (only the recent ones: an older time says nothing more than none).
        self._last: dict[str, tuple[float, bool]] = {}

    @property
    def holding(self) -> bool:
        """Whether a snapshot waits (held until its time, or not taken yet)."""
        return bool(self._due)

    def want(self, due: SnapshotDue) -> None:
        """``due`` replaces any earlier due snapshot of its session."""
        self._due[due.session_id] = due

    def _ready_at(self, session_id: str) -> float | None:
        last = self._last.get(session_id)
        if last is None:
            return None
        at, read = last
        return at + (max(self.interval, self.read_interval) if read else self.interval)

    def take(self, now: float, force: bool = False) -> tuple[dict[str, SnapshotDue], float | None]:
        """The dues to render now (every one when ``force``d) and when the first of the
        others is due (``None``: none held); the others stay, the latest of each."""
        ready: dict[str, SnapshotDue] = {}
        held: dict[str, SnapshotDue] = {}
        for sid, due in self._due.items():
            at = self._ready_at(sid)
            if force or at is None or at <= now:
                ready[sid] = due  # its time is set once it renders (``rendered``)
            else:
                held[sid] = due
        self._due = held
        self._last = {s: v for s, v in self._last.items() if (self._ready_at(s) or 0.0) > now}
        times = [at for s in held if (at := self._ready_at(s)) is not None]
        return ready, min(times, default=None)

    def rendered(self, session_id: str, now: float, *, read: bool = False) -> None:
        """The session's snapshot was rendered at ``now`` (``read``: from the file)."""
        self._last[session_id] = (now, read)

    def retry(self, due: SnapshotDue) -> float:
        """``due`` could not be rendered: held again, unless a newer one of its session
        waits; when it is due (``take`` renders it then, or at once when forced)."""
        self._due.setdefault(due.session_id, due)
        return self._ready_at(due.session_id) or 0.0

    def forget(self, session_id: str) -> None:
        """The session was deleted: nothing of it waits, its pace starts over."""
        self._due.pop(session_id, None)
        self._last.pop(session_id, None)

    def drop_waiting(self) -> None:
        """Forget every waiting snapshot (the store closed)."""
        self._due.clear()
