"""The arithmetic of ``scripts/bench_client_restart.py``: the longest wait between
answers, the client's share of an outage, medians."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from bench_client_restart import Round, longest_wait, median


def test_the_outage_is_the_longest_wait_between_answers() -> None:
    assert longest_wait([1.0, 1.1, 1.2, 4.2, 4.3]) == pytest.approx(3.0)
    assert longest_wait([2.0]) == 0.0
    assert longest_wait([]) == 0.0


def test_the_lag_is_the_outage_beyond_the_restart_and_never_negative() -> None:
    assert Round("SIGTERM", 2.5, 3.0, 0, 40, True).lag == pytest.approx(0.5)
    assert Round("SIGKILL", 2.5, 2.0, 0, 40, True).lag == 0.0


def test_median_of_odd_and_even_counts() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5
