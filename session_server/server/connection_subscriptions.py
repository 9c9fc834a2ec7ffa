"""``ConnectionSubscriptions``: a connection's ``events.subscribe`` subscriptions (I/O shell).

A mixin of ``connection_pump.Connection`` (its ``ConnectionLike`` side): at most the
server's ``max_subscriptions`` per connection, each registered with its topic before the
reads that give its floor (no gap, no duplicate), live once the subscribe answer is
queued, and dropped on ``unsubscribe`` or when the connection ends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ..rpc.method_spec import CallContext
from ..values.errors import NotFoundError, TooLargeError
from .connection_host import ConnectionHost
from .fanout import Subscriber, Subscription
from .stream_feed import StreamFeed

if TYPE_CHECKING:
    from ..runtime.actor import AgentActor

__all__ = ["ConnectionSubscriptions"]


class _Host(Subscriber, Protocol):
    """What the subscriptions use of their connection."""

    subscriptions: dict[str, Subscription]

    @property
    def server(self) -> ConnectionHost: ...

    def _drop(self, sub: Subscription) -> None: ...


class ConnectionSubscriptions:
    """Subscribe, unsubscribe and drop; the state (``subscriptions``) is the connection's."""

    async def subscribe(
        self: _Host,
        ctx: CallContext,
        actor: AgentActor,
        session_id: str,
        after_seq: int | None = None,
        stream_cursor: int | None = None,
    ) -> int:
        await actor.streams.load(actor)  # the live turns the feed follows
        existing = self.subscriptions.get(session_id)
        if existing is not None:
            row = await actor.get_session(session_id)
            if row is None:
                raise NotFoundError.session(session_id)
            if existing.feed is not None:
                existing.feed.rewind(stream_cursor)
                ctx.after_response(existing.feed.start)
            return int(row["last_seq"])
        if len(self.subscriptions) >= self.server.max_subscriptions:
            raise TooLargeError(
                f"session_id: this connection already has {len(self.subscriptions)} "
                f"subscriptions (the maximum); unsubscribe first or use another connection",
                data={"field": "session_id", "max_subscriptions": self.server.max_subscriptions},
            )
        sub = Subscription(self, session_id)
        self.subscriptions[session_id] = sub
        try:
            # Registered before the reads: an append committed meanwhile is buffered, and
            # the seq floor below drops what the reads already hold (no gap, no duplicate).
            sub.topic = self.server.topic_for(actor, session_id)
            sub.topic.subs.append(sub)
            row = await actor.get_session(session_id)
            if row is None:
                raise NotFoundError.session(session_id)
            last_seq = int(row["last_seq"])
            if after_seq is not None and after_seq < last_seq:
                sub.replay_from = after_seq  # read page by page once the answer is out
                sub.actor = actor
        except BaseException:
            self._drop(sub)
            raise
        sub.floor = last_seq
        ctx.after_response(sub.go_live)
        if self.subscriptions.get(session_id) is sub:
            sub.feed = feed = StreamFeed(self, session_id, actor.streams, stream_cursor, sub.topic)
            ctx.after_response(feed.start)
        return last_seq

    def unsubscribe(self: _Host, session_id: str) -> bool:
        sub = self.subscriptions.get(session_id)
        if sub is None:
            return False
        self._drop(sub)
        return True

    def _drop(self: _Host, sub: Subscription) -> None:
        if self.subscriptions.get(sub.session_id) is sub:
            del self.subscriptions[sub.session_id]
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
