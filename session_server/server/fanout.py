"""Subscriptions and their fan-out: ``events.appended`` from an actor to its subscribers.

A ``Topic`` is the server's one actor subscription per (agent, session); it fans the
events out to every ``Subscription`` of that session, a few subscribers per loop step.
A ``Subscription`` is one connection's: it replays the past page by page, then sends
live events within ``max_subscriber_bytes`` (beyond: ``events.gap``). What they need of
the server and of a connection is stated by the protocols ``TopicIndex`` and
``Subscriber`` (``SessionServer`` and ``connection_pump.Connection`` are both).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from ..rpc.protocol import encode_message, notification
from ..values.events import SessionEvent

if TYPE_CHECKING:
    from ..runtime.actor import AgentActor

__all__ = [
    "FANOUT_SLICE",
    "REPLAY_BATCH",
    "Subscriber",
    "SubscriberLimits",
    "Subscription",
    "Topic",
    "TopicIndex",
]

# The server's one logger name, whichever module logs: operators filter on it.
log = logging.getLogger("session_server.server")

REPLAY_BATCH = 500
"""Events per ``events.appended`` notification when a subscription replays the past."""


FANOUT_SLICE = 2
"""Subscribers served per event-loop step of a fan-out: the writer's answer (and every
other client) waits for one slice at most, not for the whole fan-out."""


class TopicIndex(Protocol):
    """The server's topics by (agent_id, session_id); a topic leaves when its last
    subscriber does."""

    @property
    def topics(self) -> dict[tuple[str, str], Topic]: ...


class SubscriberLimits(Protocol):
    """The bounds a subscription's queued notifications stay under: its own, and the
    connection's (everything it has waiting to be written)."""

    @property
    def max_subscriber_bytes(self) -> int: ...

    @property
    def max_outgoing_bytes(self) -> int: ...


class Subscriber(Protocol):
    """The connection a subscription sends on (``connection_pump.Connection``):
    ``outgoing_bytes`` wait to be written, ``writable`` is set while they are at most
    ``max_outgoing_bytes``, ``replay_lock`` takes its subscriptions' replay pages in
    turn."""

    outgoing_bytes: int
    writable: asyncio.Event
    replay_lock: asyncio.Lock

    @property
    def server(self) -> SubscriberLimits: ...

    def send(self, data: bytes, on_written: Callable[[], None] | None = None) -> None: ...

    def has_room(self, size: int) -> bool:
        """Whether ``size`` more bytes may be queued now: always when nothing is queued,
        else when they fit the connection's share and the server-wide unread-answer
        budget (notifications count toward both, as answers do)."""
        ...

    def unsubscribe(self, session_id: str) -> bool: ...


class StreamFeedLike(Protocol):
    """A subscription's live turns (``stream_feed.StreamFeed``)."""

    def start(self) -> None: ...

    def rewind(self, cursor: int | None) -> None: ...

    def caught_up(self) -> None:
        """The subscription sent its replay of stored events (it is live now)."""
        ...

    def close(self) -> None: ...


class Topic:
    """One actor subscription per (agent, session) for all of this server's subscribers.

    The actor calls ``on_events`` on the writer's path; that only queues the events. The
    fan-out runs in later loop steps, ``FANOUT_SLICE`` subscribers per step, so neither
    the append's answer nor other clients wait behind a thousand subscribers. Events that
    commit during a fan-out go out together in the next round (one notification, encoded
    once for every subscriber); a deletion goes out after the events before it.
    """

    __slots__ = (
        "deleted", "key", "pending", "rewinds", "running", "server", "subs", "unsubscribe",
        "waiters",
    )  # fmt: skip

    def __init__(self, server: TopicIndex, key: tuple[str, str]) -> None:
        self.server = server
        self.key = key
        self.subs: list[Subscription] = []
        self.unsubscribe: Callable[[], None] = lambda: None
        self.pending: list[SessionEvent] = []
        self.rewinds: list[bytes] = []
        self.deleted = False
        self.running = False
        self.waiters: list[Callable[[], None]] = []

    def after_pending(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` once the events queued so far went to every subscriber (a
        live turn's ``stream.closed`` follows the turn's stored events)."""
        self.waiters.append(callback)
        self._kick()

    def on_events(self, events: list[SessionEvent]) -> None:
        if events:
            self.pending.extend(events)
            self._kick()

    def on_deleted(self) -> None:
        self.deleted = True
        self._kick()

    def on_rewound(self, to_seq: int, rewind_seq: int) -> None:
        """A rewind: ``session.rewound`` goes out after the events committed before it."""
        params = {"session_id": self.key[1], "to_seq": to_seq, "rewind_seq": rewind_seq}
        self.rewinds.append(encode_message(notification("session.rewound", params)))
        self._kick()

    def _kick(self) -> None:
        if not self.running:
            self.running = True
            asyncio.get_running_loop().call_soon(self._round)

    def _round(self) -> None:
        if self.pending:
            events, self.pending = self.pending, []
            self._step(events, _appended(self.key[1], events), list(self.subs), 0)
            return
        if self.rewinds:
            payloads, self.rewinds = self.rewinds, []
            for sub in list(self.subs):
                if sub.topic is self and not sub.deleted:
                    for payload in payloads:
                        sub.conn.send(payload)
        self.running = False
        waiters, self.waiters = self.waiters, []
        for callback in waiters:
            callback()
        if self.deleted:
            for sub in list(self.subs):
                sub.on_deleted()

    def _step(
        self, events: list[SessionEvent], payload: bytes, subs: list[Subscription], start: int
    ) -> None:
        end = start + FANOUT_SLICE
        for sub in subs[start:end]:
            if sub.topic is not self:  # unsubscribed since the round began
                continue
            if not sub.live:
                sub.hold(events)
            elif events[0].seq > sub.floor:
                sub.deliver(payload, events[0].seq, events[-1].seq)
            else:  # overlaps what the subscribe answer already covered
                sub.deliver_events(events)
        loop = asyncio.get_running_loop()
        if end < len(subs):
            loop.call_soon(self._step, events, payload, subs, end)
        else:
            loop.call_soon(self._round)

    def remove(self, sub: Subscription) -> None:
        with contextlib.suppress(ValueError):
            self.subs.remove(sub)
        if not self.subs:
            self.server.topics.pop(self.key, None)
            try:
                self.unsubscribe()
            except Exception:
                log.exception("unsubscribe from %r failed", self.key)


def _appended(session_id: str, events: list[SessionEvent]) -> bytes:
    return encode_message(
        notification("events.appended", {"session_id": session_id, "events": events})
    )


class Subscription:
    """One connection's subscription to one session.

    Events are held until the subscribe answer is queued. Then the past (the events
    after the caller's ``after_seq``) is replayed page by page (``_replay``), then events
    with seq > ``floor`` go out as ``events.appended`` notifications; ``session.deleted``
    ends it. At most ``max_subscriber_bytes`` of notifications wait to be written (one
    always may, whatever its size), and none is added while the connection's waiting
    bytes would pass its share ``max_outgoing_bytes`` or the server-wide unread-answer
    budget (``Subscriber.has_room``: all its subscriptions and answers together; 256
    subscriptions of a connection that does not read held 256 times the first bound);
    beyond that the subscriber has fallen behind: further events are dropped and, once
    what was queued is written, one ``events.gap {session_id, from_seq, to_seq}``
    notification names the seqs it missed (read them with ``events.load``), then
    notifications resume.

    Memory stays bounded however long the history and whatever the writers do: a replay
    page holds at most ``REPLAY_BATCH`` events and about ``max_subscriber_bytes`` bytes;
    the next page is read only once the previous one is written, and the subscriptions
    of one connection read theirs in turn, each once the connection's waiting bytes are
    under ``max_outgoing_bytes``. Events committed
    while it replays are held up to ``REPLAY_BATCH``; past that they are dropped and the
    replay reads them back from SQLite instead (it goes live only after a page read that
    reached the end with nothing dropped since it began).
    """

    __slots__ = (
        "actor",
        "buffer",
        "conn",
        "deleted",
        "drained",
        "feed",
        "floor",
        "gap",
        "live",
        "overflowed",
        "pump",
        "queued",
        "replay_from",
        "session_id",
        "topic",
    )

    def __init__(self, conn: Subscriber, session_id: str) -> None:
        self.conn = conn
        self.session_id = session_id
        self.floor = 0
        self.live = False
        self.deleted = False
        self.buffer: list[SessionEvent] = []
        self.overflowed = False
        self.replay_from: int | None = None
        self.actor: AgentActor | None = None
        self.pump: asyncio.Task[None] | None = None
        self.queued = 0
        self.drained = asyncio.Event()
        self.drained.set()
        self.gap: tuple[int, int] | None = None
        self.topic: Topic | None = None
        self.feed: StreamFeedLike | None = None  # the session's live turns

    def hold(self, events: list[SessionEvent]) -> None:
        """Keep events committed before this subscription is live (bounded; see above)."""
        if self.overflowed:
            return
        self.buffer.extend(events)
        if len(self.buffer) > REPLAY_BATCH:
            self.buffer = []
            self.overflowed = True

    def deliver(self, payload: bytes, first: int, last: int) -> None:
        conn = self.conn
        if self.gap is not None:
            self.gap = (self.gap[0], last)
        elif (
            self.queued and self.queued + len(payload) > conn.server.max_subscriber_bytes
        ) or not conn.has_room(len(payload)):
            self.gap = (first, last)
            # Nothing of this subscription is waiting (the connection is full of others'):
            # no write of its own will name the gap later, so it is named now (a few bytes,
            # one at a time: later events extend the next gap until this one is written).
            self._send_gap()
        else:
            self._send(payload)
        self.floor = max(self.floor, last)

    def deliver_events(self, events: list[SessionEvent]) -> None:
        pending = [e for e in events if e.seq > self.floor]
        if pending:
            self.deliver(_appended(self.session_id, pending), pending[0].seq, pending[-1].seq)

    def _send(self, payload: bytes) -> None:
        size = len(payload)
        self.queued += size
        self.drained.clear()
        self.conn.send(payload, lambda: self._written(size))

    def _written(self, size: int) -> None:
        self.queued -= size
        if self.queued == 0:
            self.drained.set()
            self._send_gap()

    def _send_gap(self) -> None:
        """Name the seqs missed, once everything queued before is written."""
        if self.queued == 0 and self.gap is not None and self.live:
            first, last = self.gap
            self.gap = None
            self._send(
                encode_message(
                    notification(
                        "events.gap",
                        {"session_id": self.session_id, "from_seq": first, "to_seq": last},
                    )
                )
            )

    def on_deleted(self) -> None:
        self.deleted = True
        if self.live:
            self._end()

    def _end(self) -> None:
        self.conn.send(
            encode_message(notification("session.deleted", {"session_id": self.session_id}))
        )
        self.conn.unsubscribe(self.session_id)

    def go_live(self) -> None:
        """The subscribe answer is queued: replay the past, then go live."""
        if self.live or self.pump is not None:
            return
        if self.replay_from is None and not self.overflowed:
            self._open()
            return
        start = self.floor if self.replay_from is None else self.replay_from
        self.pump = asyncio.create_task(self._replay(start))

    def _open(self) -> None:
        held, self.buffer = self.buffer, []
        self.live = True
        self.deliver_events(held)
        if self.feed is not None:
            self.feed.caught_up()
        if self.deleted:
            self._end()

    async def _replay(self, cursor: int) -> None:
        """Send the events after ``cursor`` a page at a time, each once the previous one
        is written, until a read reaches the end with no held event dropped meanwhile."""
        actor = self.actor
        assert actor is not None
        server = self.conn.server
        try:
            while True:
                self.overflowed = False
                async with self.conn.replay_lock:
                    await self.conn.writable.wait()
                    page, complete = await actor.load_events_bounded(
                        self.session_id,
                        max_bytes=server.max_subscriber_bytes,
                        limit=REPLAY_BATCH,
                        tail=False,
                        after_seq=cursor,
                    )
                    at_end = complete and len(page) < REPLAY_BATCH
                    if page:
                        cursor = page[-1].seq
                        self.floor = max(self.floor, cursor)
                        self._send(_appended(self.session_id, page))
                        del page
                if at_end and not self.overflowed:
                    break
                await self.drained.wait()
        except Exception as exc:
            # The agent became unavailable: say what was missed, then carry on live.
            log.warning("replay of session %r stopped: %r", self.session_id, exc)
            if self.floor > cursor:
                self.gap = (cursor + 1, self.floor)
        self.pump = None
        self._open()
        self._send_gap()
