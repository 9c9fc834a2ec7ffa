"""``find_out_of_range_int``: the path of the first integer beyond int64 in params."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from session_server.rpc.protocol import INT64_MAX, INT64_MIN, find_out_of_range_int


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
