"""``ConnectionSubscriptions``: one connection's ``events.subscribe`` subscriptions
(I/O shell).

A collaborator of ``connection_pump.Connection``, which holds one and delegates its
``subscribe``/``unsubscribe`` to it: at most the server's ``max_subscriptions`` per
connection, each registered with its topic before the reads that give its floor (no gap,
no duplicate), live once the subscribe answer is queued, and dropped on ``unsubscribe``
or when the connection ends (``drop_all``). It holds the subscriptions by session and
what it needs to make one: the connection they send on (``fanout.Subscriber``) and the
server's bound and topics (``ConnectionHost``). A read-only mapping of session id to
``Subscription``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from ..rpc.method_spec import CallContext
from ..values.errors import NotFoundError, TooLargeError
from .connection_host import ConnectionHost
from .fanout import Subscriber, Subscription
from .stream_feed import StreamFeed

if TYPE_CHECKING:
    from ..runtime.actor import AgentActor

__all__ = ["ConnectionSubscriptions"]


class ConnectionSubscriptions(Mapping[str, Subscription]):
    """The subscriptions of one connection, by session id."""

    def __init__(self, connection: Subscriber, server: ConnectionHost) -> None:
        self._connection = connection
        self._server = server
        self._by_session: dict[str, Subscription] = {}

    def __getitem__(self, session_id: str) -> Subscription:
        return self._by_session[session_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._by_session)

    def __len__(self) -> int:
        return len(self._by_session)

    async def subscribe(
        self,
        ctx: CallContext,
        actor: AgentActor,
        session_id: str,
        after_seq: int | None = None,
        stream_cursor: int | None = None,
    ) -> int:
        """Subscribe the connection to ``session_id`` (once: a second subscribe answers
        the last seq and changes nothing but the live stream's cursor); the session's last
        seq, the floor of what the subscription sends. ``after_seq`` below it replays the
        events after it first; ``stream_cursor`` the live turn's chunks after it."""
        await actor.streams.load(actor)  # the live turns the feed follows
        existing = self._by_session.get(session_id)
        if existing is not None:
            row = await actor.get_session(session_id)
            if row is None:
                raise NotFoundError.session(session_id)
            if existing.feed is not None:
                existing.feed.rewind(stream_cursor)
                ctx.after_response(existing.feed.start)
            return int(row["last_seq"])
        bound = self._server.max_subscriptions
        if len(self._by_session) >= bound:
            raise TooLargeError(
                f"session_id: this connection already has {len(self._by_session)} "
                f"subscriptions (the maximum); unsubscribe first or use another connection",
                data={"field": "session_id", "max_subscriptions": bound},
            )
        sub = Subscription(self._connection, session_id)
        self._by_session[session_id] = sub
        try:
            # Registered before the reads: an append committed meanwhile is buffered, and
            # the seq floor below drops what the reads already hold (no gap, no duplicate).
            sub.topic = self._server.topic_for(actor, session_id)
            sub.topic.subs.append(sub)
            # The live turn's feed listens from now on too: a stream that ends during the
            # reads below still sends its ``stream.closed``.
            sub.feed = StreamFeed(
                self._connection, session_id, actor.streams, stream_cursor, sub.topic
            )
            row = await actor.get_session(session_id)
            if row is None:
                raise NotFoundError.session(session_id)
            last_seq = int(row["last_seq"])
            if after_seq is not None and after_seq < last_seq:
                sub.replay_from = after_seq  # read page by page once the answer is out
                sub.actor = actor
        except BaseException:
            self.drop(sub)
            raise
        sub.floor = last_seq
        ctx.after_response(sub.go_live)
        if sub.feed is not None:
            ctx.after_response(sub.feed.start)
        return last_seq

    def unsubscribe(self, session_id: str) -> bool:
        """Drop the subscription to ``session_id``; ``False`` when there was none."""
        sub = self._by_session.get(session_id)
        if sub is None:
            return False
        self.drop(sub)
        return True

    def drop(self, sub: Subscription) -> None:
        """End ``sub``: no more sends, its replay cancelled, out of its topic."""
        if self._by_session.get(sub.session_id) is sub:
            del self._by_session[sub.session_id]
        sub.live = False
        sub.buffer = []
        if sub.feed is not None:
            sub.feed.close()
            sub.feed = None
        if sub.pump is not None:
            sub.pump.cancel()
            sub.pump = None
        if sub.topic is not None:
            sub.topic.remove(sub)
            sub.topic = None

    def drop_all(self) -> None:
        """End every subscription (the connection is closing)."""
        for sub in list(self._by_session.values()):
            self.drop(sub)

    def delivered(self) -> dict[str, int]:
        """The last seq each subscription has delivered, by session (the idle
        watchdog's marks: ``connection_pump.subscriptions_moved``)."""
        return {session_id: sub.floor for session_id, sub in self._by_session.items()}
