"""Shared test set-up: point tiktoken at the shared encoding cache when nothing else does."""

from __future__ import annotations

import os
from pathlib import Path

if not os.environ.get("TIKTOKEN_CACHE_DIR"):
    os.environ["TIKTOKEN_CACHE_DIR"] = str(
        (Path(__file__).resolve().parent.parent / ".." / "shared" / "tiktoken").resolve()
    )
