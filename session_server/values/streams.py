"""Live turns: the pure rules of a stream (fencing, cursors, bounds, segments).

A session has at most one stream, the turn in progress. Its chunks carry cursors that
increase per session and are never reused (a new stream starts after the last cursor the
session ever gave), so a subscriber's ``stream_cursor`` names a place in every stream of
the session. A second ``stream.open`` on a session takes the stream over with a higher
generation; whatever the older generation sends afterwards is refused
(``stale_generation``). Chunks are stored in segments of up to ``SEGMENT_CHUNKS`` chunks
(``SEGMENT_BYTES`` bytes): a segment row is extended while it has room, so a long reply
costs a few dozen rows whatever the pace of its appends.

Everything here takes values and returns values: no event loop, no SQLite.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import msgspec

from .errors import ConflictError, InvalidParamsError, NotFoundError, TooLargeError

__all__ = [
    "CHUNK_TYPES",
    "SEGMENT_BYTES",
    "SEGMENT_CHUNKS",
    "AppendSlice",
    "OpenSegment",
    "SegmentWrite",
    "StreamLimits",
    "check_generation",
    "encode_chunks",
    "pack_segments",
    "slice_append",
    "split_segment",
]

SEGMENT_CHUNKS: Final = 64
"""Chunks one stored segment row holds at most (Cloudflare's streams pack about ten)."""

SEGMENT_BYTES: Final = 64 * 1024
"""Bytes of chunk JSON one segment row holds at most (one chunk may be larger alone)."""

CHUNK_TYPES: Final = frozenset({"text", "reasoning", "tool_call", "data"})
"""Chunk types whose fields are checked; any other ``type`` is carried as opaque JSON."""

_encode = msgspec.json.encode


class StreamLimits(msgspec.Struct, frozen=True):
    """The bounds of live turns (server options; ``docs/live-turns.md``)."""

    max_chunk_bytes: int = 16 * 1024
    max_chunks_per_append: int = 1_000
    max_stream_chunks: int = 20_000
    max_stream_bytes: int = 8 * 1024 * 1024
    max_streams_per_connection: int = 16
    idle_seconds: float = 600.0

    def __post_init__(self) -> None:
        for name in (
            "max_chunk_bytes",
            "max_chunks_per_append",
            "max_stream_chunks",
            "max_stream_bytes",
            "max_streams_per_connection",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}: must be a positive int, got {value!r}")
        if isinstance(self.idle_seconds, bool) or not self.idle_seconds > 0:
            raise ValueError(f"idle_seconds: must be a positive number, got {self.idle_seconds!r}")


def _check_fields(chunk: dict[str, Any], where: str) -> None:
    kind = chunk["type"]
    if kind in ("text", "reasoning"):
        if not isinstance(chunk.get("text"), str):
            raise InvalidParamsError(
                f"{where}.text: a {kind} chunk needs a string text", data={"field": f"{where}.text"}
            )
    elif kind == "tool_call":
        index = chunk.get("index", 0)
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise InvalidParamsError(
                f"{where}.index: must be a non-negative integer", data={"field": f"{where}.index"}
            )
        for key in ("id", "name", "arguments"):
            if key in chunk and not isinstance(chunk[key], str):
                raise InvalidParamsError(
                    f"{where}.{key}: must be a string", data={"field": f"{where}.{key}"}
                )
    elif kind == "data" and "data" not in chunk:
        raise InvalidParamsError(
            f"{where}.data: a data chunk needs a data field", data={"field": f"{where}.data"}
        )


def encode_chunks(chunks: Sequence[Any], limits: StreamLimits) -> list[bytes]:
    """Each chunk checked (an object with a string ``type``; the fields of the known
    types) and encoded as compact JSON; a chunk over ``max_chunk_bytes`` or an append of
    more than ``max_chunks_per_append`` chunks is refused (-32004), naming the field."""
    if not chunks:
        raise InvalidParamsError("chunks: at least one chunk", data={"field": "chunks"})
    if len(chunks) > limits.max_chunks_per_append:
        raise TooLargeError(
            f"chunks: at most {limits.max_chunks_per_append} chunks per append "
            f"(max_chunks_per_append), not {len(chunks)}",
            data={"field": "chunks", "max_chunks_per_append": limits.max_chunks_per_append},
        )
    out: list[bytes] = []
    for i, chunk in enumerate(chunks):
        where = f"chunks[{i}]"
        if not isinstance(chunk, dict) or not isinstance(chunk.get("type"), str):
            raise InvalidParamsError(
                f"{where}: a chunk is an object with a string type "
                "(text, reasoning, tool_call, data or your own)",
                data={"field": where},
            )
        _check_fields(chunk, where)
        data = _encode(chunk)
        if len(data) > limits.max_chunk_bytes:
            raise TooLargeError(
                f"{where}: {len(data)} bytes, more than max_chunk_bytes "
                f"({limits.max_chunk_bytes}); split it",
                data={"field": where, "max_chunk_bytes": limits.max_chunk_bytes},
            )
        out.append(data)
    return out


def check_generation(stream_id: str, current: int | None, given: int) -> None:
    """Refuse a call of a generation that is not the stream's current one: an older one
    is fenced (-32002, ``reason: stale_generation``), a newer one was never given."""
    if current is None:
        raise NotFoundError(
            f"stream_id: no open stream {stream_id!r} (closed, abandoned or expired)",
            data={"field": "stream_id"},
        )
    if given < current:
        raise ConflictError(
            f"generation: stream {stream_id!r} was opened again (generation {current}); "
            f"generation {given} may no longer write to it",
            data={"field": "generation", "reason": "stale_generation", "generation": current},
        )
    if given > current:
        raise InvalidParamsError(
            f"generation: stream {stream_id!r} is at generation {current}, not {given}",
            data={"field": "generation", "generation": current},
        )


class AppendSlice(msgspec.Struct, frozen=True):
    """What an append adds: ``chunks`` (new ones only) from cursor ``first_cursor``."""

    first_cursor: int
    chunks: list[bytes]

    @property
    def last_cursor(self) -> int:
        return self.first_cursor + len(self.chunks) - 1


def slice_append(
    last_cursor: int,
    chunk_count: int,
    byte_count: int,
    encoded: list[bytes],
    after_cursor: int | None,
    limits: StreamLimits,
) -> AppendSlice:
    """The chunks of an append that are new, and their first cursor.

    ``after_cursor`` (the cursor the producer's chunks follow) makes a retried append
    idempotent: chunks it already stored are skipped; a cursor past the stream's last is
    a gap (-32002, ``reason: cursor_gap``, ``data.cursor`` the last stored). Without it,
    the chunks follow the last. The stream's totals stay within ``max_stream_chunks`` and
    ``max_stream_bytes`` (-32004)."""
    if after_cursor is not None:
        if after_cursor > last_cursor:
            raise ConflictError(
                f"after_cursor: the stream's last chunk is at cursor {last_cursor}, "
                f"not {after_cursor}; send the chunks after {last_cursor}",
                data={"field": "after_cursor", "reason": "cursor_gap", "cursor": last_cursor},
            )
        known = last_cursor - after_cursor
        encoded = encoded[known:]
    added = sum(len(c) for c in encoded)
    if chunk_count + len(encoded) > limits.max_stream_chunks:
        raise TooLargeError(
            f"chunks: the stream would hold more than max_stream_chunks "
            f"({limits.max_stream_chunks}); close it",
            data={"field": "chunks", "max_stream_chunks": limits.max_stream_chunks},
        )
    if byte_count + added > limits.max_stream_bytes:
        raise TooLargeError(
            f"chunks: the stream would hold more than max_stream_bytes "
            f"({limits.max_stream_bytes}); close it",
            data={"field": "chunks", "max_stream_bytes": limits.max_stream_bytes},
        )
    return AppendSlice(last_cursor + 1, encoded)


class OpenSegment(msgspec.Struct, frozen=True):
    """The last stored segment of a stream: the first cursor (its key), chunks, bytes."""

    first_cursor: int
    chunks: int
    size: int


class SegmentWrite(msgspec.Struct, frozen=True):
    """One row write: a new segment (``extend`` false) or more chunks at the end of the
    open one. ``data`` is the chunks' JSON, one per line."""

    first_cursor: int
    last_cursor: int
    data: bytes
    chunks: int
    extend: bool


def pack_segments(
    open_segment: OpenSegment | None, first_cursor: int, chunks: Sequence[bytes]
) -> list[SegmentWrite]:
    """The row writes storing ``chunks`` (cursors from ``first_cursor``): the open segment
    filled up to ``SEGMENT_CHUNKS`` / ``SEGMENT_BYTES`` first, then new segments."""
    writes: list[SegmentWrite] = []
    cursor = first_cursor
    i = 0
    seg = open_segment
    while i < len(chunks):
        if seg is None or seg.chunks >= SEGMENT_CHUNKS or seg.size >= SEGMENT_BYTES:
            seg_first, count, size, extend = cursor, 0, 0, False
        else:
            seg_first, count, size, extend = seg.first_cursor, seg.chunks, seg.size, True
        taken: list[bytes] = []
        while i < len(chunks) and count < SEGMENT_CHUNKS:
            piece = len(chunks[i]) + 1
            if count and size + piece > SEGMENT_BYTES:
                break
            taken.append(chunks[i])
            count += 1
            size += piece
            i += 1
        if not taken:  # the open segment is full by bytes: start a new one
            seg = OpenSegment(cursor, SEGMENT_CHUNKS, SEGMENT_BYTES)
            continue
        data = b"".join(c + b"\n" for c in taken)
        last = cursor + len(taken) - 1
        writes.append(SegmentWrite(seg_first, last, data, len(taken), extend))
        seg = OpenSegment(seg_first, count, size)
        cursor = last + 1
    return writes


def split_segment(data: bytes) -> list[bytes]:
    """A stored segment's chunks (the inverse of the ``data`` of ``pack_segments``)."""
    return [line for line in data.split(b"\n") if line]
