"""``StreamFeed``: one subscription's live turns, ``stream.chunk`` and ``stream.closed``.

Beside each ``events.subscribe`` subscription (``fanout.Subscription``) a feed listens to
the session's stream (``runtime.live_streams``). It keeps the cursor of the last chunk it
sent and, whenever there is something after it and room to send, sends the next chunks:
replay and tail are the same loop over the stream's chunks, held by the actor from the
first, so a subscriber that (re)subscribes with ``stream_cursor`` gets every chunk after
it, then the live ones, with no gap and no duplicate. At most ``FEED_BATCH`` chunks go in
one notification, and at most one notification of a feed waits to be written (a slow
reader falls behind, then catches up from the stream; it never costs more memory).
``stream.closed`` goes out after the stored events of the turn: after the topic's events
queued before it (``Topic.after_pending``) and after the subscription's replay of stored
events (``caught_up``). The feed listens from before the subscribe's reads, so a stream
that ends meanwhile is not missed; a subscription resumed with ``stream_cursor`` after
the stream it followed ended (its chunks are erased) gets that stream's ``stream.closed``
(``values.stream_resume.missed_close``). A feed sends each stream's ``stream.closed``
once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import msgspec

from ..rpc.protocol import encode_message, notification
from ..values.stream_resume import missed_close
from .fanout import Subscriber, Topic

if TYPE_CHECKING:
    from ..runtime.live_streams import LiveStream, LiveStreams

__all__ = ["FEED_BATCH", "StreamFeed"]

FEED_BATCH: Final = 256
"""Chunks per ``stream.chunk`` notification at most (a replay sends several)."""

MAX_HELD_CLOSES: Final = 16
"""``stream.closed`` notifications a feed holds while its subscription replays stored
events (streams that ended meanwhile; the oldest is dropped beyond it)."""


class StreamFeed:
    """The stream side of one connection's subscription to one session."""

    __slots__ = (
        "caught", "closes", "conn", "cursor", "last_closed", "live", "sending", "session_id",
        "stop", "streams", "topic",
    )  # fmt: skip

    def __init__(
        self,
        conn: Subscriber,
        session_id: str,
        streams: LiveStreams,
        cursor: int | None,
        topic: Topic | None,
    ) -> None:
        self.conn = conn
        self.session_id = session_id
        self.streams = streams
        # ``None``: from the first chunk of the stream in progress.
        self.cursor = cursor
        self.topic = topic
        self.live = False
        # Whether the subscription sent the stored events it replays (a feed without a
        # topic has none to wait for).
        self.caught = topic is None
        self.sending = False
        # ``(stream_id, payload)`` of ``stream.closed`` waiting for the replay to end.
        self.closes: list[tuple[str, bytes]] = []
        self.last_closed: str | None = None  # the last stream whose close was queued
        self.stop: Callable[[], None] = streams.listen(session_id, self)

    def start(self) -> None:
        """The subscribe answer is queued: send what the stream holds, then follow it.
        A subscriber resuming after a stream that ended since gets its ``stream.closed``."""
        self.live = True
        ended = self.streams.ended(self.session_id)
        if ended is not None and missed_close(self.cursor, ended):
            self.stream_closed(ended.stream_id, ended.persisted)
        stream = self.streams.current(self.session_id)
        if stream is not None:
            self.stream_chunks(stream)
        self._send_closes()

    def caught_up(self) -> None:
        """The subscription sent the stored events it replays: closes may follow them."""
        self.caught = True
        self._send_closes()

    def rewind(self, cursor: int | None) -> None:
        """Another subscribe of the same session on this connection: send again from
        ``cursor`` (``None``: the stream's first chunk); the client drops what its other
        subscriptions already have."""
        if cursor is None or self.cursor is None:
            self.cursor = None
        else:
            self.cursor = min(self.cursor, cursor)

    def close(self) -> None:
        self.live = False
        self.stop()

    def stream_chunks(self, stream: LiveStream) -> None:
        if not self.live or self.sending:
            return
        cursor = self.cursor
        if cursor is None or cursor < stream.first_cursor - 1:
            cursor = stream.first_cursor - 1
        first, chunks = stream.after(cursor, FEED_BATCH)
        if not chunks:
            return
        last = first + len(chunks) - 1
        payload = encode_message(
            notification(
                "stream.chunk",
                {
                    "session_id": self.session_id,
                    "stream_id": stream.stream_id,
                    "cursor": last,
                    "chunks": [msgspec.Raw(c) for c in chunks],
                },
            )
        )
        self.cursor = last
        self.sending = True
        self.conn.send(payload, self._written)

    def _written(self) -> None:
        self.sending = False
        stream = self.streams.current(self.session_id)
        if stream is not None:
            self.stream_chunks(stream)

    def stream_closed(self, stream_id: str, persisted: bool) -> None:
        """Queue the stream's ``stream.closed`` (once per stream) behind the stored events
        queued before it; it goes out once the feed is live and the replay is over."""
        if stream_id == self.last_closed:
            return
        self.last_closed = stream_id
        payload = encode_message(
            notification(
                "stream.closed",
                {"session_id": self.session_id, "stream_id": stream_id, "persisted": persisted},
            )
        )

        def hold() -> None:
            self.closes.append((stream_id, payload))
            del self.closes[:-MAX_HELD_CLOSES]
            self._send_closes()

        if self.topic is None:
            hold()
        else:
            self.topic.after_pending(hold)

    def _send_closes(self) -> None:
        if not (self.live and self.caught) or not self.closes:
            return
        closes, self.closes = self.closes, []
        for _stream_id, payload in closes:
            self.conn.send(payload)
