"""``LiveStreams``: one agent's live turns, the streams of its sessions (I/O shell).

A collaborator of ``AgentActor`` (``actor.streams``). It keeps every open stream of the
agent in memory (its chunks from the first, bounded by ``StreamLimits``) and on disk
(``storage.stream_rows``), and tells the listeners of a session (the server's
subscriptions) of new chunks and of the stream's end. The rules are the pure
``values.streams``; this class only orders the I/O:

- every write (open, the chunks of appends, abandon, the close's turn) goes through the
  actor's mailbox, so it is ordered with the agent's other writes;
- appends that arrive while a commit of chunks is in flight are stored together in the
  next one (one transaction for all of them, whatever their streams); an append is
  answered once its chunks are committed (that is what "acknowledged" means), and only
  then are they sent to subscribers, so a cursor a subscriber saw survives a crash;
- ``close`` with a turn commits the turn's events and ends the stream in one transaction
  (``AppendBatch.end_stream``), through the same plan as ``turn.persist``;
- a stream idle for ``limits.idle_seconds`` is abandoned (its chunks erased).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import uuid
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import msgspec

from ..core.agent_core import AgentCore
from ..core.decisions import AppendPlan
from ..core.needs import Known
from ..storage.store import AgentStore
from ..storage.stream_rows import StoredStream
from ..values.codec import now_ms
from ..values.context import WorkingContext
from ..values.errors import InvalidParamsError, NotFoundError, SessionServerError, TooLargeError
from ..values.events import ContextMessage, SessionEvent
from ..values.plans import AppendResult
from ..values.stream_resume import EndedStream
from ..values.streams import (
    OpenSegment,
    SegmentWrite,
    StreamLimits,
    check_generation,
    encode_chunks,
    pack_segments,
    slice_append,
    split_segment,
)
from .compaction_turns import CompactionTurns, Pump

T = TypeVar("T")


class StreamHost(Pump, Protocol):
    """What the streams need of their actor (given with each call: no reference back)."""

    @property
    def core(self) -> AgentCore: ...

    @property
    def compactions(self) -> CompactionTurns: ...

    async def run_read(self, fn: Callable[[AgentStore], Awaitable[T]]) -> T: ...

    async def run_write(self, fn: Callable[[AgentStore], Awaitable[T]]) -> T: ...

    def subscribe(
        self,
        session_id: str,
        callback: Callable[[list[SessionEvent]], None],
        on_deleted: Callable[[], None] | None = None,
    ) -> Callable[[], None]: ...


__all__ = ["RECENT_CLOSES", "LiveStream", "LiveStreams", "StreamHost", "StreamListener"]

RECENT_CLOSES = 1_000
"""Closes an agent remembers, so that a close retried after a lost answer is answered."""

log = logging.getLogger("session_server.runtime.streams")


@dataclass(slots=True, eq=False)
class LiveStream:
    """An open stream: its chunks (from ``first_cursor``), its generation and owner."""

    session_id: str
    stream_id: str
    generation: int
    first_cursor: int
    base_seq: int | None
    chunks: list[bytes] = field(default_factory=list)
    size: int = 0
    segment: OpenSegment | None = None
    touched: float = 0.0  # loop time of the last open or append
    owner: weakref.ref[Any] | None = None
    closing: bool = False

    @property
    def last_cursor(self) -> int:
        """The cursor of the last stored chunk (``first_cursor - 1`` when none)."""
        return self.first_cursor + len(self.chunks) - 1

    def after(self, cursor: int, limit: int) -> tuple[int, list[bytes]]:
        """At most ``limit`` chunks after ``cursor``: ``(first cursor, chunks)``."""
        start = max(cursor + 1, self.first_cursor)
        i = start - self.first_cursor
        return start, self.chunks[i : i + limit]


class StreamListener(Protocol):
    """Told of a session's stream: new chunks (read them with ``LiveStream.after``) and
    its end (``persisted``: the turn was stored; ``last_seq`` its last event)."""

    def stream_chunks(self, stream: LiveStream) -> None: ...

    def stream_closed(self, stream_id: str, persisted: bool) -> None: ...


@dataclass(slots=True)
class _Append:
    stream: LiveStream
    generation: int
    encoded: list[bytes]
    after_cursor: int | None
    future: asyncio.Future[int]


class LiveStreams:
    """The live turns of one agent (see the module docstring)."""

    def __init__(self, agent_id: str, limits: StreamLimits | None = None) -> None:
        self.agent_id = agent_id
        self.limits = limits or StreamLimits()
        self._by_session: dict[str, LiveStream] = {}
        self._by_id: dict[str, LiveStream] = {}
        self._listeners: dict[str, list[StreamListener]] = {}
        self._unwatch: dict[str, Callable[[], None]] = {}
        self._loaded = False
        self._load_lock = asyncio.Lock()
        self._pending: list[_Append] = []
        self._flushing = False
        self._timer: asyncio.TimerHandle | None = None
        self._recent: dict[tuple[str, int], AppendResult | None] = {}
        # The last stream that ended, by session (the last ``RECENT_CLOSES`` sessions): a
        # subscription resumed after it owes its subscriber the ``stream.closed``.
        self._ended: dict[str, EndedStream] = {}

    # -- reads ---------------------------------------------------------------------------

    def current(self, session_id: str) -> LiveStream | None:
        """The session's open stream, if any (as loaded: call ``load`` first)."""
        return self._by_session.get(session_id)

    def ended(self, session_id: str) -> EndedStream | None:
        """The session's last stream that ended while this actor ran, if remembered."""
        return self._ended.get(session_id)

    def session_of(self, stream_id: str) -> str | None:
        """The session of an open stream (``None``: no such stream)."""
        stream = self._by_id.get(stream_id)
        return None if stream is None else stream.session_id

    def listen(self, session_id: str, listener: StreamListener) -> Callable[[], None]:
        """Tell ``listener`` of the session's chunks and stream ends; returns the
        function that stops it."""
        listeners = self._listeners.setdefault(session_id, [])
        listeners.append(listener)

        def stop() -> None:
            with contextlib.suppress(ValueError):
                listeners.remove(listener)
            if not listeners and self._listeners.get(session_id) is listeners:
                del self._listeners[session_id]

        return stop

    async def load(self, actor: StreamHost) -> None:
        """Read the agent's open streams from its file, once (after a restart they are
        there with every chunk that was acknowledged)."""
        if self._loaded:
            return
        async with self._load_lock:
            if self._loaded:
                return
            stored = await actor.run_read(lambda s: s.load_streams())
            for row in stored:
                self._adopt(actor, row)
            self._loaded = True
        self._schedule_expiry(actor)

    def _adopt(self, actor: StreamHost, row: StoredStream) -> None:
        stream = LiveStream(row.session_id, row.stream_id, row.generation, row.first_cursor,
                            row.base_seq)  # fmt: skip
        for _first, count, data in row.segments:
            chunks = split_segment(data)
            stream.chunks.extend(chunks)
            stream.segment = OpenSegment(_first, count, len(data))
        stream.size = sum(len(c) for c in stream.chunks)
        idle_ms = max(0, now_ms() - row.updated_at)
        stream.touched = asyncio.get_running_loop().time() - idle_ms / 1000
        self._track(actor, stream)

    def _track(self, actor: StreamHost, stream: LiveStream) -> None:
        sid = stream.session_id
        self._by_session[sid] = stream
        self._by_id[stream.stream_id] = stream
        if sid not in self._unwatch:
            self._unwatch[sid] = actor.subscribe(sid, _ignore, lambda: self._deleted(sid))

    def _untrack(self, stream: LiveStream) -> None:
        if self._by_session.get(stream.session_id) is stream:
            del self._by_session[stream.session_id]
        self._by_id.pop(stream.stream_id, None)
        unwatch = self._unwatch.pop(stream.session_id, None)
        if unwatch is not None:
            unwatch()

    def _deleted(self, session_id: str) -> None:
        """The session was deleted (its stream rows went in the same transaction)."""
        self._ended.pop(session_id, None)
        stream = self._by_session.get(session_id)
        if stream is not None:
            self._untrack(stream)
            self._closed(stream, persisted=False)

    def _closed(self, stream: LiveStream, *, persisted: bool) -> None:
        for listener in list(self._listeners.get(stream.session_id, ())):
            try:
                listener.stream_closed(stream.stream_id, persisted)
            except Exception:
                log.exception("stream listener of %r failed", stream.session_id)

    def _chunks(self, stream: LiveStream) -> None:
        for listener in list(self._listeners.get(stream.session_id, ())):
            try:
                listener.stream_chunks(stream)
            except Exception:
                log.exception("stream listener of %r failed", stream.session_id)

    def _stream(self, stream_id: str, generation: int) -> LiveStream:
        stream = self._by_id.get(stream_id)
        check_generation(stream_id, None if stream is None else stream.generation, generation)
        assert stream is not None
        if stream.closing:
            raise NotFoundError(
                f"stream_id: stream {stream_id!r} is being closed", data={"field": "stream_id"}
            )
        return stream

    def owned_by(self, owner: object) -> int:
        """Open streams whose last ``open`` came from ``owner`` (a connection)."""
        return sum(1 for s in self._by_id.values() if s.owner is not None and s.owner() is owner)

    # -- open ----------------------------------------------------------------------------

    async def open(
        self,
        actor: StreamHost,
        session_id: str,
        base_seq: int | None = None,
        owner: object | None = None,
    ) -> dict[str, Any]:
        """Open the session's stream, or take it over (same stream and chunks, a higher
        generation: the older producer is fenced). Answers ``{stream_id, generation,
        cursor, base_seq}``, ``cursor`` being the last chunk stored (a producer taking
        over sends what follows it)."""
        await self.load(actor)
        if owner is not None:
            existing = self._by_session.get(session_id)
            ref = None if existing is None else existing.owner
            mine = ref is not None and ref() is owner
            if not mine and self.owned_by(owner) >= self.limits.max_streams_per_connection:
                raise TooLargeError(
                    f"session_id: this connection already has "
                    f"{self.limits.max_streams_per_connection} open streams (the maximum); "
                    "close one first",
                    data={
                        "field": "session_id",
                        "max_streams_per_connection": self.limits.max_streams_per_connection,
                    },
                )

        async def body(store: AgentStore) -> LiveStream:
            old = self._by_session.get(session_id)
            if old is not None:
                stream = LiveStream(session_id, old.stream_id, old.generation + 1,
                                    old.first_cursor, base_seq)  # fmt: skip
            else:
                counters = await store.stream_counters(session_id)
                generation, last = counters if counters is not None else (0, 0)
                stream = LiveStream(session_id, uuid.uuid4().hex, generation + 1, last + 1,
                                    base_seq)  # fmt: skip
            await store.open_stream(session_id, stream.stream_id, stream.generation,
                                    stream.first_cursor, base_seq, now_ms())  # fmt: skip
            if old is not None:  # taken over: same chunks, the new generation writes
                stream.chunks, stream.size, stream.segment = old.chunks, old.size, old.segment
                self._untrack(old)
            stream.touched = asyncio.get_running_loop().time()
            stream.owner = None if owner is None else _weak(owner)
            self._track(actor, stream)
            return stream

        stream = await actor.run_write(body)
        self._schedule_expiry(actor)
        return {
            "stream_id": stream.stream_id,
            "generation": stream.generation,
            "cursor": stream.last_cursor,
            "base_seq": stream.base_seq,
        }

    # -- append --------------------------------------------------------------------------

    async def append(
        self,
        actor: StreamHost,
        stream_id: str,
        generation: int,
        chunks: Sequence[Any],
        after_cursor: int | None = None,
    ) -> dict[str, Any]:
        """Store chunks; answer ``{cursor}`` (the last chunk's) once they are committed."""
        encoded = encode_chunks(chunks, self.limits)
        await self.load(actor)
        stream = self._stream(stream_id, generation)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._pending.append(_Append(stream, generation, encoded, after_cursor, future))
        self._kick(actor)
        return {"cursor": await future}

    def _kick(self, actor: StreamHost) -> None:
        if self._flushing or not self._pending:
            return
        self._flushing = True
        taken, self._pending = self._pending, []
        task = asyncio.ensure_future(actor.run_write(lambda store: self._flush(store, taken)))
        task.add_done_callback(lambda t: self._flushed(actor, t, taken))

    def _flushed(self, actor: StreamHost, task: asyncio.Task[None], taken: list[_Append]) -> None:
        self._flushing = False
        exc = None if task.cancelled() else task.exception()
        for item in taken:  # the flush never ran (the store could not open)
            if not item.future.done():
                item.future.set_exception(exc or NotFoundError("stream: append not stored"))
        self._kick(actor)

    async def _flush(self, store: AgentStore, taken: list[_Append]) -> None:
        """Under the write lock: every taken append checked in order, then stored in
        one transaction; answered (and sent to subscribers) after the commit."""
        accepted: list[tuple[_Append, int, list[bytes]]] = []
        work: dict[LiveStream, tuple[int, int, int, OpenSegment | None, list[SegmentWrite]]]
        work = {}
        for item in taken:
            stream = item.stream
            try:
                current = self._by_id.get(stream.stream_id)
                if current is not stream or stream.closing:
                    current_gen = None if current is None else current.generation
                    check_generation(stream.stream_id, current_gen, item.generation)
                    raise NotFoundError(
                        f"stream_id: stream {stream.stream_id!r} is closed",
                        data={"field": "stream_id"},
                    )
                last, count, size, seg, writes = work.get(
                    stream,
                    (stream.last_cursor, len(stream.chunks), stream.size, stream.segment, []),
                )
                piece = slice_append(last, count, size, item.encoded, item.after_cursor,
                                     self.limits)  # fmt: skip
                new = pack_segments(seg, piece.first_cursor, piece.chunks)
                if new:
                    w = new[-1]
                    if w.extend and seg is not None:
                        seg = OpenSegment(seg.first_cursor, seg.chunks + w.chunks,
                                          seg.size + len(w.data))  # fmt: skip
                    else:
                        seg = OpenSegment(w.first_cursor, w.chunks, len(w.data))
                added = sum(len(c) for c in piece.chunks)
                work[stream] = (
                    max(last, piece.last_cursor), count + len(piece.chunks), size + added,
                    seg, writes + new,
                )  # fmt: skip
                # The answer is the cursor of the append's own last chunk (a retry's too).
                mine = piece.last_cursor
                if item.after_cursor is not None:
                    mine = item.after_cursor + len(item.encoded)
                accepted.append((item, mine, piece.chunks))
            except SessionServerError as exc:
                item.future.set_exception(exc)
        if not work or not any(w[4] for w in work.values()):
            for item, cursor, _ in accepted:
                item.future.set_result(cursor)
            return
        now = now_ms()
        items = [
            (s.session_id, s.stream_id, s.generation, w[4], now) for s, w in work.items() if w[4]
        ]
        try:
            await store.write_stream_segments(items)
        except BaseException as exc:
            for item, _, _ in accepted:
                if not item.future.done():
                    item.future.set_exception(exc)
            raise
        loop_now = asyncio.get_running_loop().time()
        for stream, (_last, _count, size, seg, _writes) in work.items():
            stream.size = size
            stream.segment = seg
            stream.touched = loop_now
        for item, cursor, chunks in accepted:
            item.stream.chunks.extend(chunks)
            if not item.future.done():
                item.future.set_result(cursor)
        for stream in work:
            self._chunks(stream)

    # -- close ---------------------------------------------------------------------------

    async def close(
        self,
        actor: StreamHost,
        stream_id: str,
        generation: int,
        messages: Sequence[ContextMessage | dict[str, Any]] | None = None,
        *,
        idempotency_key: str | None = None,
        usage: dict[str, Any] | None = None,
        validated: bool = False,
    ) -> AppendResult | None:
        """End the stream. With ``messages`` the turn is persisted as ``turn.persist``
        would (``base_seq`` the stream's, so a session that moved is a conflict and the
        stream stays open) and the stream ends in the same transaction: the result is the
        persist's. Without, the stream is abandoned: ``None``.

        A close repeated after it succeeded (the answer was lost) finds no stream: with
        the same generation it answers the first answer again while this actor remembers
        it (the last ``RECENT_CLOSES`` closes); after a restart, ``turn.persist`` with the
        close's ``idempotency_key`` replays the stored turn's answer."""
        await self.load(actor)
        if stream_id not in self._by_id and (stream_id, generation) in self._recent:
            return self._recent[stream_id, generation]
        stream = self._stream(stream_id, generation)
        stream.closing = True  # appends arriving now are refused
        try:
            if messages is None:
                await actor.run_write(lambda s: s.end_stream(stream.session_id, stream_id))
                result = None
            else:
                result = await self._persist(actor, stream, messages, idempotency_key, usage,
                                             validated)  # fmt: skip
        except BaseException:
            stream.closing = False
            raise
        self._untrack(stream)
        self._recent[stream_id, generation] = result
        while len(self._recent) > RECENT_CLOSES:
            del self._recent[next(iter(self._recent))]
        self._ended.pop(stream.session_id, None)  # re-inserted last: the newest
        self._ended[stream.session_id] = EndedStream(
            stream_id, stream.first_cursor, stream.last_cursor, result is not None
        )
        while len(self._ended) > RECENT_CLOSES:
            del self._ended[next(iter(self._ended))]
        self._closed(stream, persisted=result is not None)
        return result

    async def _persist(
        self,
        actor: StreamHost,
        stream: LiveStream,
        messages: Sequence[ContextMessage | dict[str, Any]],
        idempotency_key: str | None,
        usage: dict[str, Any] | None,
        validated: bool,
    ) -> AppendResult:
        """The turn's plan (``core.prepare_turn``/``plan_turn``, as ``turn.persist``),
        committed with the end of the stream."""
        if not messages:
            raise InvalidParamsError(
                "turn.messages: a turn has at least one message", data={"field": "turn.messages"}
            )
        ctx = WorkingContext(base_seq=stream.base_seq or 0)
        ctx.add_messages(list(messages))  # type: ignore[arg-type]  # checked by prepare_turn
        turn = actor.core.prepare_turn(
            stream.session_id,
            ctx,
            usage=usage,
            on_conflict="reject" if stream.base_seq is not None else "append",
            idempotency_key=idempotency_key,
            validated=validated,
        )
        step: AppendPlan | AppendResult = await actor.decide(
            lambda known: actor.core.plan_turn(turn, known), Known()
        )
        if isinstance(step, AppendResult):  # answered without a write (a known key)
            await actor.run_write(lambda s: s.end_stream(stream.session_id, stream.stream_id))
            return step
        batch = copy.copy(step.batch)
        msgspec.structs.force_setattr(batch, "end_stream", stream.stream_id)
        plan = AppendPlan(batch, step.snapshot, step.removals)
        result = await actor.commit(plan)
        if batch.compaction_required:
            actor.compactions.prime(actor, stream.session_id, [], None)
        # The stream's chunk rows went in that commit; erase their old WAL frames too.
        await actor.run_write(lambda s: s.erase_wal())
        return result

    # -- expiry ----------------------------------------------------------------------------

    def _schedule_expiry(self, actor: StreamHost) -> None:
        if self._timer is not None or not self._by_id:
            return
        loop = asyncio.get_running_loop()
        due = min(s.touched for s in self._by_id.values()) + self.limits.idle_seconds
        self._timer = loop.call_at(due, self._expire, actor)

    def _expire(self, actor: StreamHost) -> None:
        self._timer = None
        now = asyncio.get_running_loop().time()
        for stream in list(self._by_id.values()):
            if not stream.closing and now - stream.touched >= self.limits.idle_seconds:
                task = asyncio.ensure_future(self.close(actor, stream.stream_id, stream.generation))
                task.add_done_callback(_log_expiry)
        self._schedule_expiry(actor)

    def forget(self) -> None:
        """Drop the in-memory state (the actor's file was replaced or it is closing)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for stream in list(self._by_id.values()):
            self._untrack(stream)
        self._ended.clear()
        self._loaded = False


def _ignore(_events: object) -> None:
    """The appends of a watched session (only its deletion matters here)."""


def _weak(owner: object) -> weakref.ref[Any]:
    return weakref.ref(owner)


def _log_expiry(task: asyncio.Task[Any]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.warning("an idle stream could not be expired: %r", task.exception())
