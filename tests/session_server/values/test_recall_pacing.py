"""The backfill's pacing (pure): it rests as long as each step took, within a bound."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from session_server.values.recall_pacing import MAX_REST_S, STEP_CHARS, STEP_ROWS, rest


@given(st.floats(min_value=-1.0, max_value=100.0, allow_nan=False))
def test_the_rest_is_the_step_time_within_its_bound(elapsed: float) -> None:
    pause = rest(elapsed)
    assert 0.0 <= pause <= MAX_REST_S
    if 0.0 <= elapsed <= MAX_REST_S:
        assert pause == elapsed


def test_a_step_is_small() -> None:
    assert rest(0.03) == 0.03
    assert rest(5.0) == MAX_REST_S
    assert 1 <= STEP_ROWS <= 256 and 1 <= STEP_CHARS <= 256 * 1024
