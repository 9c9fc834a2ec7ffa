"""values.metadata_merge: a per-key merge of a session's metadata, held to its bound."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from session_server.values.errors import InvalidParamsError
from session_server.values.metadata_merge import MAX_SESSION_METADATA_BYTES, merge_metadata

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
objects = st.dictionaries(st.text(max_size=6), json_values, max_size=6)


def test_the_given_keys_replace_whole_values_and_the_rest_stay() -> None:
    current = {"a": 1, "profile": {"name": "Ada", "age": 36}, "gone": "no"}
    patch = {"profile": {"name": "Bob"}, "gone": None, "new": [1]}
    assert merge_metadata(current, patch) == {
        "a": 1,
        "profile": {"name": "Bob"},  # replaced, not merged deeper
        "gone": None,  # null is stored, never a delete
        "new": [1],
    }
    assert merge_metadata(None, {"k": "v"}) == {"k": "v"}
    assert current == {"a": 1, "profile": {"name": "Ada", "age": 36}, "gone": "no"}


def test_a_merge_over_the_bound_is_refused_naming_metadata() -> None:
    big = {"blob": "x" * (MAX_SESSION_METADATA_BYTES - 100)}
    assert merge_metadata(big, {"k": 1}) == {**big, "k": 1}
    with pytest.raises(InvalidParamsError) as info:
        merge_metadata(big, {"more": "y" * 200})
    assert info.value.data == {"field": "metadata", "max_bytes": MAX_SESSION_METADATA_BYTES}
    assert merge_metadata({}, {"a": "x" * 50}, max_bytes=64) == {"a": "x" * 50}
    with pytest.raises(InvalidParamsError):
        merge_metadata({}, {"a": "x" * 60}, max_bytes=64)


@given(objects, objects, objects)
def test_merges_of_disjoint_keys_commute(
    current: dict[str, Any], one: dict[str, Any], two: dict[str, Any]
) -> None:
    """Two writers setting different keys end with both, whichever merged first."""
    two = {k: v for k, v in two.items() if k not in one}
    a = merge_metadata(merge_metadata(current, one), two)
    b = merge_metadata(merge_metadata(current, two), one)
    assert a == b == {**current, **one, **two}
    assert len(msgspec.json.encode(a)) <= MAX_SESSION_METADATA_BYTES
