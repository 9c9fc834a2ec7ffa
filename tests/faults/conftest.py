"""Fault, load and bad-input suite: ``--soak`` multiplies rounds and durations.

``pytest tests/faults`` runs the short version (part of ``scripts/test``); ``pytest
tests/faults --soak`` (or ``--soak=N``) runs each fault test ``N`` (default 10) times
longer: more SIGKILL rounds, more fuzz frames, a longer load phase.
"""

from __future__ import annotations

import contextlib

import pytest

DEFAULT_SOAK_FACTOR = 10


def pytest_addoption(parser: pytest.Parser) -> None:
    # Also re-exported by tests/conftest.py so `pytest tests --soak` works; add it once.
    with contextlib.suppress(ValueError):
        parser.addoption(
            "--soak",
            action="store",
            nargs="?",
            type=int,
            const=DEFAULT_SOAK_FACTOR,
            default=1,
            metavar="FACTOR",
            help="run the fault suite FACTOR times longer (default when given: "
            f"{DEFAULT_SOAK_FACTOR})",
        )


@pytest.fixture
def soak(request: pytest.FixtureRequest) -> int:
    """The soak factor: 1 in a normal run."""
    return max(1, int(request.config.getoption("--soak")))
