"""``Subscriptions``: who hears of an agent's committed appends and deleted sessions (I/O shell).

Callbacks run on the event loop, in seq order, while the actor's write lock is still
held (the commit's effects call ``publish``), so no append can be missed or reordered.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable

from ..values.events import SessionEvent

__all__ = ["RewindWatcher", "Subscriber", "Subscriptions"]

# The actor's logger: these records were the actor's before subscriptions had a module.
log = logging.getLogger("session_server.runtime.actor")

Subscriber = Callable[[list[SessionEvent]], None]
RewindWatcher = Callable[[int, int], None]
"""Called with ``(to_seq, rewind_seq)`` after a committed rewind of the session."""


class Subscriptions:
    """The subscribers of one agent's sessions."""

    def __init__(self, agent_id: str) -> None:
        self.agent_id = agent_id
        # Per session: the callbacks of its appends, and of its deletion.
        self.subscribers: dict[str, list[Subscriber]] = {}
        self.deletion_watchers: dict[str, list[Callable[[], None]]] = {}
        self.rewind_watchers: dict[str, list[RewindWatcher]] = {}

    def subscribe(
        self,
        session_id: str,
        callback: Subscriber,
        on_deleted: Callable[[], None] | None = None,
        on_rewound: RewindWatcher | None = None,
    ) -> Callable[[], None]:
        """Call ``callback(events)`` after every committed append to ``session_id``,
        ``on_deleted()`` once when the session is deleted (the subscription ends then),
        and ``on_rewound(to_seq, rewind_seq)`` after each rewind of it.
        Returns the unsubscribe function."""
        subs = self.subscribers.setdefault(session_id, [])
        subs.append(callback)
        watchers = self.deletion_watchers.setdefault(session_id, [])
        if on_deleted is not None:
            watchers.append(on_deleted)
        if on_rewound is not None:
            self.rewind_watchers.setdefault(session_id, []).append(on_rewound)

        def unsubscribe() -> None:
            if on_rewound is not None:
                rewinds = self.rewind_watchers.get(session_id, [])
                with contextlib.suppress(ValueError):
                    rewinds.remove(on_rewound)
                if not rewinds:
                    self.rewind_watchers.pop(session_id, None)
            with contextlib.suppress(ValueError):
                subs.remove(callback)
            with contextlib.suppress(ValueError):
                if on_deleted is not None:
                    watchers.remove(on_deleted)
            if not subs and self.subscribers.get(session_id) is subs:
                self.subscribers.pop(session_id, None)
            if not watchers and self.deletion_watchers.get(session_id) is watchers:
                self.deletion_watchers.pop(session_id, None)

        return unsubscribe

    def publish_deleted(self, session_id: str) -> None:
        """The session was deleted: tell its watchers once and end its subscriptions."""
        self.subscribers.pop(session_id, None)
        self.rewind_watchers.pop(session_id, None)
        for watcher in self.deletion_watchers.pop(session_id, ()):
            try:
                watcher()
            except Exception:
                log.exception("deletion watcher of %r/%r failed", self.agent_id, session_id)

    def publish_rewound(self, session_id: str, to_seq: int, rewind_seq: int) -> None:
        """A committed rewind of the session, to each of its rewind watchers."""
        for watcher in list(self.rewind_watchers.get(session_id, ())):
            try:
                watcher(to_seq, rewind_seq)
            except Exception:
                log.exception("rewind watcher of %r/%r failed", self.agent_id, session_id)

    def publish(self, session_id: str, events: list[SessionEvent]) -> None:
        """Committed ``events`` of the session, to each of its subscribers."""
        for callback in list(self.subscribers.get(session_id, ())):
            try:
                callback(events)
            except Exception:
                log.exception("subscriber of %r/%r failed", self.agent_id, session_id)
