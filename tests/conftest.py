"""Shared test set-up: point tiktoken at the shared encoding cache when nothing else does."""

from __future__ import annotations

import os

from tests.support.paths import SHARED

if not os.environ.get("TIKTOKEN_CACHE_DIR"):
    os.environ["TIKTOKEN_CACHE_DIR"] = str((SHARED / "tiktoken").resolve())

# The fault suite's `--soak` option, registered here too so `pytest tests --soak` works
# (pytest only takes options from the conftest files it loads at start-up).
from tests.faults.conftest import pytest_addoption  # noqa: F401
