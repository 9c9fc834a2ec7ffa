"""The reconnection schedule: exponential, jittered, capped, within the budget (pure)."""

from __future__ import annotations

import itertools

import pytest

from session_server.client.backoff import Backoff


def test_without_jitter_the_waits_double_up_to_the_cap() -> None:
    backoff = Backoff(initial=0.05, max_delay=2.0, factor=2.0, jitter=0.0)
    assert [backoff.delay(n, 0.9) for n in range(8)] == [
        0.05,
        0.1,
        0.2,
        0.4,
        0.8,
        1.6,
        2.0,
        2.0,
    ]


@pytest.mark.parametrize("attempt", [0, 1, 5, 40, 10_000])
def test_the_jitter_draws_between_half_and_all_of_the_cap(attempt: int) -> None:
    backoff = Backoff(initial=0.05, max_delay=2.0, jitter=0.5)
    cap = min(2.0, 0.05 * 2.0 ** min(attempt, 64))
    assert backoff.delay(attempt, 0.0) == pytest.approx(cap)
    assert backoff.delay(attempt, 0.999999) == pytest.approx(cap / 2, rel=1e-5)
    assert cap / 2 <= backoff.delay(attempt, 0.3) <= cap


def test_different_draws_spread_the_clients() -> None:
    backoff = Backoff()
    assert len({backoff.delay(3, u / 10) for u in range(10)}) == 10


def test_no_wait_ends_past_the_budget_and_a_spent_budget_gives_up() -> None:
    backoff = Backoff(budget=1.0, initial=0.4, max_delay=0.4, jitter=0.0)
    assert backoff.wait(0, 0.0, 0.5) == 0.4
    assert backoff.wait(5, 0.8, 0.5) == pytest.approx(0.2)  # cut to what is left
    assert backoff.wait(6, 1.0, 0.5) is None
    assert backoff.wait(6, 3.0, 0.5) is None


def test_a_simulated_outage_makes_attempts_until_the_budget_and_not_after() -> None:
    backoff = Backoff(budget=30.0)
    elapsed, waits = 0.0, []
    for attempt in itertools.count():
        wait = backoff.wait(attempt, elapsed, (attempt * 0.37) % 1)
        if wait is None:
            break
        waits.append(wait)
        elapsed += wait
    assert elapsed == pytest.approx(30.0)  # the last attempt is made at the budget's end
    assert max(waits) <= 2.0
    assert 15 <= len(waits) <= 60  # at most max_delay apart once the cap is reached


def test_a_retry_after_raises_the_wait_within_the_budget() -> None:
    backoff = Backoff(budget=5.0, jitter=0.0)
    assert backoff.wait(0, 0.0, 0.0, min_delay=1.0) == 1.0
    assert backoff.wait(0, 4.5, 0.0, min_delay=1.0) == 0.5


def test_a_zero_budget_gives_up_after_the_first_attempt() -> None:
    assert Backoff(budget=0.0).wait(0, 0.0, 0.5) is None


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("budget", -1.0),
        ("budget", float("inf")),
        ("initial", float("nan")),
        ("max_delay", -0.1),
        ("factor", 0.5),
        ("jitter", 1.5),
    ],
)
def test_settings_out_of_range_are_refused_naming_the_field(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"^{field}: "):
        Backoff(**{field: value})
