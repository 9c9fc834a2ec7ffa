"""Benchmark scripts keep their own section of BENCHMARKS.md between markers.

``<!-- NAME:start -->`` ... ``<!-- NAME:end -->`` (``scripts/bench_all.py`` keeps such
sections when it rewrites the report); ``write_section`` replaces a script's section or
appends it.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["markers", "write_section"]


def markers(name: str) -> tuple[str, str]:
    """The start and end markers of section ``name``."""
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def write_section(path: Path, name: str, section: str) -> None:
    """Put ``section`` (which begins and ends with its markers) in place of the file's
    section ``name``, or at its end when it has none."""
    start, end = markers(name)
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end) + "\n?", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _m: section, text)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text)
