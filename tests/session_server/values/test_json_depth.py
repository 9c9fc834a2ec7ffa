"""``values.json_depth``: the nesting bound of client JSON."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from session_server.values.json_depth import (
    MAX_JSON_DEPTH,
    deep_path,
    json_text_too_deep,
    may_nest_deeper,
    nests_deeper,
    text_depth,
)


def nested(levels: int) -> Any:
    value: Any = 0
    for i in range(levels):
        value = {"k": value} if i % 2 else [value]
    return value


def depth(value: Any) -> int:
    """The reference: levels of arrays and objects (recursive, for small values)."""
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


def test_the_bound_is_inclusive_and_the_path_names_the_first_container_beyond_it() -> None:
    assert deep_path(nested(MAX_JSON_DEPTH)) is None
    assert deep_path({"a": [1, {"b": nested(3)}]}, "params", limit=4) == "params.a[1].b[0]"
    assert deep_path({"a": nested(2), "b": nested(9)}, "p", limit=3) == "p.b[0].k"
    assert nests_deeper(nested(MAX_JSON_DEPTH + 1))


JSON = st.recursive(
    st.none() | st.integers() | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner),
    max_leaves=30,
)


@given(JSON, st.integers(min_value=0, max_value=8))
def test_nests_deeper_agrees_with_the_reference(value: Any, limit: int) -> None:
    assert nests_deeper(value, limit) == (depth(value) > limit)


TEXTY = st.recursive(
    st.none() | st.integers() | st.text(alphabet='[]{}"\\ a\u00e9\n', max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(alphabet='[]{}"\\ a', max_size=3), inner)
    ),
    max_leaves=30,
)


@given(TEXTY, st.booleans())
def test_text_depth_counts_only_the_brackets_outside_strings(value: Any, ascii: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii)
    assert text_depth(text) == depth(value)
    assert text_depth(text.encode()) == depth(value)


def test_texts() -> None:
    assert not may_nest_deeper("[" * 5 + "]" * 5, 5)
    assert may_nest_deeper(b"{[" * 3, 5)
    assert json_text_too_deep("[" * 100_000 + "]" * 100_000)  # beyond the decoder's reach
    assert json_text_too_deep("[" * 101 + "]" * 101)
    assert not json_text_too_deep("[" * 100 + "]" * 100)
    assert not json_text_too_deep('{"a": "' + "[" * 500 + '"}')  # brackets in a string
    assert not json_text_too_deep("[" * 300 + "not json")  # not JSON: kept as it is
