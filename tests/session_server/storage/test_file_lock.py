"""The one flock helper: taken, refused while held, free again once released."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from session_server.storage.file_lock import try_exclusive_lock


def test_a_held_lock_is_refused_until_released(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    first = try_exclusive_lock(path)
    assert first is not None and path.exists()
    # flock locks belong to the open file: a second open conflicts, even in this process.
    assert try_exclusive_lock(path) is None
    os.close(first)
    again = try_exclusive_lock(path)
    assert again is not None
    os.close(again)


def test_create_false_needs_an_existing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        try_exclusive_lock(tmp_path / "missing.lock", create=False)
    assert not (tmp_path / "missing.lock").exists()
