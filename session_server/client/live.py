"""Live turns in the client: ``LiveSubscription`` (stored events and stream chunks, one
async iterator, across reconnects) and ``StreamWriter`` (a producer's stream).

``LiveSubscription`` yields, in the order the server sent them, ``SessionEvent`` values
(stored events, as ``Subscription`` does), ``StreamChunk`` (chunks of the turn in
progress, each once: a resumed subscription asks for the chunks after the last cursor it
received) and ``StreamClosed`` (the stream ended; with ``persisted`` the turn's stored
events came before it). A subscription resumed after its stream ended gets that stream's
``StreamClosed`` (its remaining chunks are erased: the stored turn holds the reply), and
each stream's ``StreamClosed`` comes once.

``StreamWriter`` keeps at most one ``stream.append`` in flight and sends the chunks
written meanwhile together in the next one (so a fast model costs a few appends, not one
per token), each with ``after_cursor``: an append whose answer was lost (a reconnect) is
sent again and the server skips what it already stored. ``close(messages)`` persists the
turn with the end of the stream; retried after a restart with its idempotency key it
answers the stored turn's result (``turn.persist`` with that key).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

import msgspec

from ..values.errors import NotFoundError
from ..values.events import SessionEvent
from ..values.plans import AppendResult
from .errors import OutcomeUnknownError
from .subscription import Subscription, SubscriptionOwner

__all__ = ["LiveItem", "LiveSubscription", "StreamChunk", "StreamClosed", "StreamWriter"]


class StreamChunk(msgspec.Struct, frozen=True):
    """Chunks of a live turn: ``cursor`` is the cursor of the last one."""

    session_id: str
    stream_id: str
    cursor: int
    chunks: list[dict[str, Any]]


class StreamClosed(msgspec.Struct, frozen=True):
    """The live turn ended (``persisted``: its turn was stored)."""

    session_id: str
    stream_id: str
    persisted: bool


LiveItem = SessionEvent | StreamChunk | StreamClosed


class LiveSubscription(Subscription):
    """Stored events and live-turn chunks of one session (see the module docstring).
    ``stream_cursor`` is the cursor of the last chunk received (``None``: none yet)."""

    def __init__(
        self, client: SubscriptionOwner, session_id: str, stream_cursor: int | None = None
    ) -> None:
        super().__init__(client, session_id)
        self.stream_cursor = stream_cursor
        self.closed_stream: str | None = None  # the last stream whose end was delivered

    def deliver_chunks(self, params: dict[str, Any]) -> None:
        """Queue a ``stream.chunk`` notification's chunks not received before."""
        chunk = msgspec.convert(params, StreamChunk)
        first = chunk.cursor - len(chunk.chunks) + 1
        seen = self.stream_cursor
        if seen is not None and seen >= first:
            fresh = chunk.chunks[seen - first + 1 :]
            if not fresh:
                return
            chunk = msgspec.structs.replace(chunk, chunks=fresh)
        self.stream_cursor = chunk.cursor
        self._queue.put_nowait([chunk])

    def deliver_closed(self, params: dict[str, Any]) -> None:
        """Queue a ``stream.closed``, unless this stream's end was delivered already (a
        resumed subscription is told again of the stream it last followed)."""
        closed = msgspec.convert(params, StreamClosed)
        if closed.stream_id == self.closed_stream:
            return
        self.closed_stream = closed.stream_id
        self._queue.put_nowait([closed])

    def __aiter__(self) -> AsyncIterator[LiveItem]:  # type: ignore[override]
        return self

    async def __anext__(self) -> LiveItem:  # type: ignore[override]
        return await super().__anext__()


class StreamCaller(Protocol):
    """What a writer needs of its client (``SessionClient``)."""

    async def stream_open(
        self, session_id: str, *, base_seq: int | None = None
    ) -> dict[str, Any]: ...

    async def stream_append(
        self,
        stream_id: str,
        generation: int,
        chunks: Sequence[dict[str, Any]],
        *,
        after_cursor: int | None = None,
    ) -> int: ...

    async def stream_close(
        self,
        stream_id: str,
        generation: int,
        turn: dict[str, Any] | None = None,
    ) -> dict[str, Any]: ...

    async def persist_turn(
        self,
        session_id: str,
        messages: Sequence[Any],
        *,
        idempotency_key: str | None = None,
        usage: dict[str, Any] | None = None,
    ) -> AppendResult: ...


class StreamWriter:
    """A producer's live turn (``SessionClient.stream``): ``await writer.write(chunk,
    ...)``, then ``await writer.close(messages)`` or ``await writer.abandon()``."""

    def __init__(self, client: StreamCaller, session_id: str, opened: dict[str, Any]) -> None:
        self.client = client
        self.session_id = session_id
        self.stream_id: str = opened["stream_id"]
        self.generation: int = int(opened["generation"])
        # The last chunk the server acknowledged (stored durably).
        self.cursor: int = int(opened["cursor"])
        self._queued: list[dict[str, Any]] = []
        self._inflight: asyncio.Task[None] | None = None
        self._error: BaseException | None = None

    async def write(self, *chunks: dict[str, Any]) -> None:
        """Queue chunks; they go in the next append (at most one in flight). Raises the
        error of an earlier append (a stale generation: another producer took over)."""
        if self._error is not None:
            raise self._error
        self._queued.extend(chunks)
        if self._inflight is None:
            self._inflight = asyncio.ensure_future(self._pump())
        await asyncio.sleep(0)  # let the pump take this batch before the next write

    async def _pump(self) -> None:
        try:
            while self._queued:
                batch, self._queued = self._queued, []
                after = self.cursor
                self.cursor = await self.client.stream_append(
                    self.stream_id, self.generation, batch, after_cursor=after
                )
        except BaseException as exc:
            self._error = exc
            raise
        finally:
            self._inflight = None

    async def flush(self) -> int:
        """Wait until every chunk written is acknowledged; the last cursor."""
        while self._inflight is not None or self._queued:
            if self._inflight is None:
                self._inflight = asyncio.ensure_future(self._pump())
            task = self._inflight
            await asyncio.wait([task])
            if self._error is not None:
                raise self._error
        return self.cursor

    async def close(
        self,
        messages: Sequence[Any],
        *,
        idempotency_key: str | None = None,
        usage: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Persist the turn and end the stream in one transaction (the ``turn.persist``
        answer). The chunks written are flushed first."""
        await self.flush()
        key = idempotency_key or str(uuid.uuid4())
        turn: dict[str, Any] = {"messages": list(messages), "idempotency_key": key}
        if usage is not None:
            turn["usage"] = usage
        try:
            try:
                return await self.client.stream_close(self.stream_id, self.generation, turn)
            except OutcomeUnknownError:  # the connection dropped: ask again
                return await self.client.stream_close(self.stream_id, self.generation, turn)
        except NotFoundError:
            # The stream is gone: closed by a first attempt whose answer was lost (then
            # the key replays its answer), or expired (then the turn is appended now).
            result = await self.client.persist_turn(
                self.session_id, turn["messages"], idempotency_key=key, usage=usage
            )
            return msgspec.to_builtins(result)  # type: ignore[no-any-return]

    async def abandon(self) -> None:
        """End the stream without a turn (its chunks are erased)."""
        if self._inflight is not None:
            await asyncio.wait([self._inflight])
        await self.client.stream_close(self.stream_id, self.generation, None)
