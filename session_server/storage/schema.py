"""Locate and read ``schema.sql`` (shipped inside the package; at the repo root in a checkout)."""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path

__all__ = ["READABLE_SCHEMA_VERSION", "SCHEMA_VERSION", "schema_sql"]

SCHEMA_VERSION = 12

# The oldest version a read-only store reads as it is (it cannot migrate): a session row
# is read with its fork columns (version 6, ``MIGRATIONS[5]``).
READABLE_SCHEMA_VERSION = 6


@functools.cache
def schema_sql() -> str:
    """The DDL the store executes on a new database."""
    packaged = resources.files("session_server").joinpath("schema.sql")
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    # Editable installs and checkouts: the file lives at the repository root.
    return (Path(__file__).resolve().parents[2] / "schema.sql").read_text(encoding="utf-8")
