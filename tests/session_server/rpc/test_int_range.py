"""``find_out_of_range_int``: the path of the first integer beyond int64 in params."""

from __future__ import annotations

import json
import re
import tracemalloc
from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from session_server.rpc import protocol
from session_server.rpc.protocol import (
    INT64_MAX,
    INT64_MIN,
    Request,
    find_out_of_range_int,
    parse_frame,
)
from session_server.values.errors import ParseError


def test_the_first_integer_out_of_range_is_named_by_its_path() -> None:
    params = {"a": [1, {"b": INT64_MAX}], "c": {"d": [0, INT64_MAX + 1, INT64_MIN - 1]}}
    assert find_out_of_range_int(params) == "params.c.d[1]"
    assert find_out_of_range_int({"x": [INT64_MIN - 1]}, "p") == "p.x[0]"
    assert find_out_of_range_int({"a": [INT64_MIN, INT64_MAX, True, 1.5e300, "9" * 40]}) is None


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=20,
)


def _paths(value: Any, path: str) -> list[str]:
    """Every out-of-range integer's path, in document order (the reference)."""
    if type(value) is int:
        return [] if INT64_MIN <= value <= INT64_MAX else [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _paths(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _paths(v, f"{path}[{i}]")]
    return []


@given(JSON)
def test_the_answer_is_the_first_out_of_range_path_in_document_order(value: Any) -> None:
    found = _paths(value, "params")
    assert find_out_of_range_int(value) == (found[0] if found else None)


@given(JSON)
def test_a_frame_without_19_digits_in_a_row_skips_the_walk_safely(value: Any) -> None:
    """``parse_frame`` marks a request ``long_ints=False`` only when its frame has no run
    of 19 digits; no integer beyond int64 can then be in its params."""
    try:
        text = json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "m", "params": {"v": value}}, allow_nan=False
        )
    except ValueError:  # an infinity: not JSON
        assume(False)
    for data in (text, text.encode()):
        request = parse_frame(data).items[0]
        assert isinstance(request, Request)
        assert request.long_ints == (re.search("[0-9]{19}", text) is not None)
        if not request.long_ints:
            assert find_out_of_range_int(request.params) is None


def test_the_digit_runs_that_mark_a_frame() -> None:
    def marked(params: str) -> bool:
        frame = f'{{"jsonrpc": "2.0", "id": 1, "method": "m", "params": {params}}}'
        request = parse_frame(frame.encode()).items[0]
        assert isinstance(request, Request)
        return request.long_ints

    assert not marked('{"n": 999999999999999999}')  # 18 digits: always in range
    assert marked('{"n": 9223372036854775807}')  # INT64_MAX: checked (and in range)
    assert marked('{"n": -9223372036854775809}')
    assert marked('{"s": "id 12345678901234567890"}')  # digits in a string: checked too
    assert not marked('{"f": 1.5e300, "n": [1, 2, 3]}')


def test_a_bytearray_frame_is_scanned_too() -> None:
    frame = bytearray(b'{"jsonrpc": "2.0", "id": 1, "method": "m", "params": {"n": 1}}')
    request = parse_frame(bytes(frame)).items[0]
    assert isinstance(request, Request) and not request.long_ints
    frame[-3:-2] = b"9" * 20
    request = parse_frame(frame).items[0]  # type: ignore[arg-type]
    assert isinstance(request, Request) and request.long_ints


# JSON number literals as a peer may write them: any length of integer part, fractions,
# exponents (``1e19`` and ``10E+18`` are integral values without 19 digits in a row).
NUMBER = st.from_regex(
    r"-?(0|[1-9][0-9]{0,24})(\.[0-9]{1,4})?([eE][+-]?[0-9]{1,3})?", fullmatch=True
)
BLANK = st.sampled_from(["", " ", "\n", "\t", "\r\n  "])


@given(st.lists(st.tuples(BLANK, NUMBER, BLANK), min_size=1, max_size=8))
def test_msgspec_decodes_no_integer_beyond_int64_from_a_frame_without_19_digits(
    numbers: list[tuple[str, str, str]],
) -> None:
    """The premise of the skipped walk, checked against msgspec's own decoding: a number
    written with an exponent or a fraction decodes as a float (never an int), so only a
    literal of 19 digits or more can give an integer outside int64."""
    body = ",".join(f"{before}{number}{after}" for before, number, after in numbers)
    frame = f'{{"jsonrpc":"2.0","id":1,"method":"m","params":{{"v":[{body}]}}}}'.encode()
    try:
        request = parse_frame(frame).items[0]
    except ParseError:  # a float beyond the double range: msgspec refuses the frame
        assume(False)
    assert isinstance(request, Request)
    decoded = request.params["v"]
    assert len(decoded) == len(numbers)
    for (_, number, _), value in zip(numbers, decoded, strict=True):
        assert (type(value) is int) == (re.fullmatch(r"-?[0-9]+", number) is not None)
    if not request.long_ints:
        assert find_out_of_range_int(request.params) is None


def test_the_digit_scan_of_a_large_frame_copies_a_slice_at_a_time() -> None:
    """A frame of several MiB (parsed on a worker) is not copied whole to find its digit
    runs (a large append already holds a few times its size); a run that straddles two
    slices is still found, wherever it starts."""
    chunk = protocol._SCAN_CHUNK
    frame = b"a " * (2 * chunk)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        marked = protocol._may_hold_long_ints(frame)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert not marked and peak < 3 * chunk, peak
    for start in range(chunk - 20, chunk + 2):
        for data in (bytearray(b"x" * (2 * chunk)), bytearray(b"x" * (chunk + 40))):
            data[start : start + 19] = b"1" * 19
            assert protocol._may_hold_long_ints(data), start
            data[start + 9 : start + 10] = b" "
            assert not protocol._may_hold_long_ints(data), start
