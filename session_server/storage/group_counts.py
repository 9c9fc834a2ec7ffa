"""``GroupCounts``: a group commit's token counts, taken on a count thread ahead of the
writer (I/O shell: threads).

A group commit stores its batches one after the other on the writer thread, and each
batch's events need their token counts first (``sqlite_ops.append``). The counts of the
later batches do not depend on the earlier ones' rows: a count thread takes them in
order while the writer stores, so tiktoken's encoding (which releases the GIL) runs beside
SQLite's work instead of before it.

Each batch is counted exactly once, by whichever thread claims it first: the writer,
reaching a batch the count thread has not started, counts it itself, and waits only for
a batch the count thread is counting at that moment. So the writer never waits for a
count that has not started (no deadlock when the count thread is busy elsewhere or never
runs), and a count that failed on the count thread is taken again by the writer, which
then fails (or refuses) that batch exactly as it would have.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from typing import Final

from ..concurrency.worker_threads import WorkerThreads
from ..values.plans import AppendBatch
from ..values.tokens import count_events

__all__ = ["GroupCounts"]

_FREE: Final = 0
_COUNTING: Final = 1
_DONE: Final = 2
_WRITER: Final = 3


class GroupCounts:
    """The counts of ``batches`` (those without given counts), taken ahead on
    ``threads``; ``take(i)`` on the writer thread, in order."""

    def __init__(self, batches: Sequence[AppendBatch], threads: WorkerThreads) -> None:
        self._batches = batches
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._counts: list[list[int] | None] = [None] * len(batches)
        # The first batch is the writer's: it starts at once, before the thread wakes.
        self._state = [
            _WRITER if i == 0 or b.token_counts is not None or not b.events else _FREE
            for i, b in enumerate(batches)
        ]
        with contextlib.suppress(RuntimeError):  # shut down: the writer counts everything
            threads.post(self._run)

    def _run(self) -> None:
        for i, batch in enumerate(self._batches):
            with self._lock:
                if self._state[i] != _FREE:
                    continue
                self._state[i] = _COUNTING
            counts: list[int] | None = None
            try:
                counts = count_events(batch.events)
            except Exception:  # the writer counts it again and fails it in its place
                pass
            finally:  # even when the thread is stopped mid-count: a writer may wait
                with self._lock:
                    self._counts[i] = counts
                    self._state[i] = _DONE
                    self._changed.notify_all()

    def take(self, i: int) -> list[int] | None:
        """Batch ``i``'s counts when the count thread took them; ``None``: the batch's own
        (given, or to be counted by the caller)."""
        with self._lock:
            if self._state[i] in (_FREE, _WRITER):
                self._state[i] = _WRITER
                return None
            while self._state[i] == _COUNTING:
                self._changed.wait()
            return self._counts[i]
