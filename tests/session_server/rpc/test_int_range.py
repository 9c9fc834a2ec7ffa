"""``find_out_of_range_int``: the path of the first integer beyond int64 in params."""

from __future__ import annotations

import json
import re
from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from session_server.rpc.protocol import (
    INT64_MAX,
    INT64_MIN,
    Request,
    find_out_of_range_int,
    parse_frame,
)


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
