"""The pure rules of live turns: chunk checks, fencing, cursor arithmetic, segments."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from session_server.values.errors import (
    ConflictError,
    InvalidParamsError,
    NotFoundError,
    TooLargeError,
)
from session_server.values.streams import (
    SEGMENT_BYTES,
    SEGMENT_CHUNKS,
    OpenSegment,
    StreamLimits,
    check_generation,
    encode_chunks,
    pack_segments,
    slice_append,
    split_segment,
)

LIMITS = StreamLimits()


def test_chunks_are_encoded_compactly() -> None:
    out = encode_chunks([{"type": "text", "text": "hé"}, {"type": "mine", "x": [1]}], LIMITS)
    assert [msgspec.json.decode(c) for c in out] == [
        {"type": "text", "text": "hé"},
        {"type": "mine", "x": [1]},
    ]
    assert b" " not in out[1]


@pytest.mark.parametrize(
    ("chunk", "field"),
    [
        ("text", "chunks[0]"),
        ({"text": "no type"}, "chunks[0]"),
        ({"type": "text"}, "chunks[0].text"),
        ({"type": "reasoning", "text": 3}, "chunks[0].text"),
        ({"type": "tool_call", "index": -1}, "chunks[0].index"),
        ({"type": "tool_call", "index": 0, "arguments": {}}, "chunks[0].arguments"),
        ({"type": "data"}, "chunks[0].data"),
    ],
)
def test_malformed_chunks_are_refused_naming_the_field(chunk: object, field: str) -> None:
    with pytest.raises(InvalidParamsError) as refused:
        encode_chunks([chunk], LIMITS)
    assert refused.value.data == {"field": field}


def test_chunk_and_append_bounds() -> None:
    small = StreamLimits(max_chunk_bytes=40, max_chunks_per_append=2)
    with pytest.raises(TooLargeError, match=r"chunks\[1\]"):
        encode_chunks([{"type": "text", "text": ""}, {"type": "text", "text": "x" * 40}], small)
    with pytest.raises(TooLargeError, match="max_chunks_per_append"):
        encode_chunks([{"type": "text", "text": ""}] * 3, small)
    with pytest.raises(InvalidParamsError):
        encode_chunks([], small)


def test_limits_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="max_chunk_bytes"):
        StreamLimits(max_chunk_bytes=0)
    with pytest.raises(ValueError, match="idle_seconds"):
        StreamLimits(idle_seconds=0)


def test_generations_fence() -> None:
    check_generation("s", 3, 3)
    with pytest.raises(ConflictError) as stale:
        check_generation("s", 3, 2)
    assert stale.value.data is not None
    assert stale.value.data["reason"] == "stale_generation"
    assert stale.value.data["generation"] == 3
    with pytest.raises(InvalidParamsError):
        check_generation("s", 3, 4)
    with pytest.raises(NotFoundError):
        check_generation("s", None, 1)


def test_append_slices() -> None:
    chunks = [b"a", b"b", b"c"]
    plain = slice_append(10, 5, 5, chunks, None, LIMITS)
    assert (plain.first_cursor, plain.last_cursor, plain.chunks) == (11, 13, chunks)
    retried = slice_append(12, 5, 5, chunks, 10, LIMITS)  # two of them are stored
    assert (retried.first_cursor, retried.chunks) == (13, [b"c"])
    assert slice_append(13, 5, 5, chunks, 10, LIMITS).chunks == []
    with pytest.raises(ConflictError) as gap:
        slice_append(10, 5, 5, chunks, 11, LIMITS)
    assert gap.value.data is not None and gap.value.data["reason"] == "cursor_gap"
    with pytest.raises(TooLargeError, match="max_stream_chunks"):
        slice_append(0, 4, 4, chunks, None, StreamLimits(max_stream_chunks=6))
    with pytest.raises(TooLargeError, match="max_stream_bytes"):
        slice_append(0, 4, 4, chunks, None, StreamLimits(max_stream_bytes=6))


@given(
    appends=st.lists(
        st.lists(st.binary(min_size=1, max_size=3000).map(lambda b: b.hex().encode()),
                 min_size=1, max_size=80),
        min_size=1, max_size=30,
    )
)  # fmt: skip
def test_segments_hold_every_chunk_in_order_within_their_bounds(
    appends: list[list[bytes]],
) -> None:
    """Replaying the row writes of any sequence of appends gives back every chunk, in
    cursor order; no row passes the bounds unless one chunk alone does."""
    rows: dict[int, tuple[int, bytes, int]] = {}  # first cursor -> (last, data, chunks)
    seg: OpenSegment | None = None
    cursor = 1
    for chunks in appends:
        for w in pack_segments(seg, cursor, chunks):
            if w.extend:
                last, data, count = rows[w.first_cursor]
                assert last + 1 == w.last_cursor - w.chunks + 1
                rows[w.first_cursor] = (w.last_cursor, data + w.data, count + w.chunks)
            else:
                assert w.first_cursor not in rows
                rows[w.first_cursor] = (w.last_cursor, w.data, w.chunks)
            _, data, count = rows[w.first_cursor]
            seg = OpenSegment(w.first_cursor, count, len(data))
        cursor += len(chunks)
    stored: list[bytes] = []
    for first in sorted(rows):
        last, data, count = rows[first]
        pieces = split_segment(data)
        assert len(pieces) == count == last - first + 1
        assert count <= SEGMENT_CHUNKS
        assert count == 1 or len(data) <= SEGMENT_BYTES
        stored += pieces
    assert stored == [c for chunks in appends for c in chunks]


def test_a_long_reply_of_single_appends_is_a_few_dozen_rows() -> None:
    seg: OpenSegment | None = None
    rows = 0
    for cursor in range(1, 2001):
        (w,) = pack_segments(seg, cursor, [b'{"type":"text","text":"tok"}'])
        rows += not w.extend
        seg = OpenSegment(w.first_cursor, (seg.chunks if w.extend and seg else 0) + 1,
                          (seg.size if w.extend and seg else 0) + len(w.data))  # fmt: skip
    assert rows == -(-2000 // SEGMENT_CHUNKS)
