"""Shared test set-up: point tiktoken at the shared encoding cache when nothing else does."""

from __future__ import annotations

# The fault suite's `--soak` option, registered here too so `pytest tests --soak` works
# (pytest only takes options from the conftest files it loads at start-up).
from tests.faults.conftest import pytest_addoption  # noqa: F401
from tests.support.bench_env import use_shared_tiktoken

use_shared_tiktoken()
