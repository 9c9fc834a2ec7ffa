"""``values.usage_state``: a session's usage kept in its row, days closed as they change."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from session_server.values.usage import UsageTotals
from session_server.values.usage_state import (
    SessionUsage,
    add_turn,
    decode_session_usage,
    decode_turn,
    encode_session_usage,
    encode_turn,
)

MODELS = st.sampled_from([None, "gpt", "claude"])
TURNS = st.lists(
    st.tuples(
        st.integers(0, 10_000),  # input
        st.integers(0, 5_000),  # output
        MODELS,
        st.integers(19_000, 19_010),  # day
    ),
    max_size=40,
)


def usage(tokens_in: int, tokens_out: int, model: str | None) -> UsageTotals:
    return UsageTotals(tokens_in, tokens_out, tokens_in // 2, 0, tokens_out // 3, 1, model)


def test_a_turn_on_the_open_day_closes_nothing() -> None:
    state, day, closed = add_turn(None, usage(100, 10, "gpt"), 5)
    assert (state.d, day, closed) == (5, None, {})
    assert state.t == state.p == {"gpt": [100, 10, 50, 0, 3, 1]}
    state, day, closed = add_turn(state, usage(10, 1, None), 5)
    assert (day, closed) == (None, {})
    assert state.t == state.p == {"gpt": [100, 10, 50, 0, 3, 1], "": [10, 1, 5, 0, 0, 1]}


def test_a_turn_on_another_day_closes_the_open_one() -> None:
    state, _, _ = add_turn(None, usage(100, 10, "gpt"), 5)
    state, day, closed = add_turn(state, usage(7, 3, "gpt"), 6)
    assert day == 5 and closed == {"gpt": [100, 10, 50, 0, 3, 1]}
    assert state.d == 6 and state.p == {"gpt": [7, 3, 3, 0, 1, 1]}
    assert state.t == {"gpt": [107, 13, 53, 0, 4, 2]}
    # a clock that went back closes the open day all the same: nothing counted twice
    state, day, closed = add_turn(state, usage(1, 1, "gpt"), 4)
    assert day == 6 and closed == {"gpt": [7, 3, 3, 0, 1, 1]}


@given(TURNS)
def test_closed_days_and_the_open_day_add_up_to_the_totals(turns: list) -> None:
    state: SessionUsage | None = None
    days: dict[tuple[int, str], list[int]] = {}
    expected: dict[tuple[int, str], list[int]] = {}
    for tokens_in, tokens_out, model, day in turns:
        u = usage(tokens_in, tokens_out, model)
        # stored and read back between turns, as the session row is
        state = decode_session_usage(encode_session_usage(state)) if state else None
        state, closed_day, closed = add_turn(state, u, day)
        for m, counts in closed.items():
            assert closed_day is not None
            have = days.setdefault((closed_day, m), [0] * 6)
            days[(closed_day, m)] = [a + b for a, b in zip(have, counts, strict=True)]
        key = (day, model or "")
        have = expected.setdefault(key, [0] * 6)
        expected[key] = [a + b for a, b in zip(have, [*u.counts(), 1], strict=True)]
    if state is None:
        assert not turns
        return
    assert state.d is not None
    for m, counts in state.p.items():  # the open day
        have = days.setdefault((state.d, m), [0] * 6)
        days[(state.d, m)] = [a + b for a, b in zip(have, counts, strict=True)]
    assert days == expected
    totals: dict[str, list[int]] = {}
    for (_, m), counts in expected.items():
        have = totals.setdefault(m, [0] * 6)
        totals[m] = [a + b for a, b in zip(have, counts, strict=True)]
    assert state.t == totals


@given(st.integers(0, 2**53), st.integers(0, 2**53), MODELS)
def test_a_turn_record_round_trips(tokens_in: int, tokens_out: int, model: str | None) -> None:
    u = UsageTotals(tokens_in, tokens_out, tokens_in // 2, tokens_in // 4, tokens_out, 1, model)
    assert decode_turn(encode_turn(u)).totals() == u


def test_an_absent_session_usage_reads_as_none() -> None:
    assert decode_session_usage(None) is None
    assert encode_session_usage(SessionUsage()) == "{}"
