"""``values.stream_resume``: which ``stream.closed`` a resumed subscription owes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from session_server.values.stream_resume import EndedStream, missed_close


def test_a_cursor_inside_the_ended_stream_is_owed_its_close() -> None:
    ended = EndedStream("s", first_cursor=1, last_cursor=100, persisted=True)
    assert missed_close(50, ended)
    assert missed_close(100, ended)  # every chunk seen, maybe not the close: sent again
    assert missed_close(0, ended)  # none of its chunks seen yet


def test_a_new_subscriber_or_a_later_stream_is_owed_nothing() -> None:
    ended = EndedStream("s", first_cursor=21, last_cursor=40, persisted=False)
    assert not missed_close(None, ended)  # a new subscriber wants the stream in progress
    assert not missed_close(41, ended)  # the cursor of a later stream
    assert not missed_close(19, ended)  # it followed an earlier stream
    assert not missed_close(30, None)  # no stream ended


def test_an_ended_stream_checks_its_cursors() -> None:
    with pytest.raises(ValueError, match="cursors"):
        EndedStream("s", first_cursor=0, last_cursor=0, persisted=True)
    with pytest.raises(ValueError, match="cursors"):
        EndedStream("s", first_cursor=10, last_cursor=8, persisted=True)
    assert EndedStream("s", first_cursor=10, last_cursor=9, persisted=False)  # no chunk


@given(
    first=st.integers(1, 10_000),
    length=st.integers(0, 10_000),
    cursor=st.integers(0, 30_000),
)
def test_owed_exactly_when_the_cursor_lies_in_the_stream_or_just_before(
    first: int, length: int, cursor: int
) -> None:
    ended = EndedStream("s", first, first + length - 1, persisted=True)
    chunk_cursors = set(range(first, first + length))
    owed = missed_close(cursor, ended)
    assert owed == (cursor in chunk_cursors or cursor == first - 1)
