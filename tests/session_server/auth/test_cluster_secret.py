"""The cluster secret file: its first non-empty line, at least 32 bytes."""

from __future__ import annotations

from pathlib import Path

import pytest

from session_server.auth.cluster_secret import MAX_SECRET_FILE_BYTES, read_cluster_secret


def test_the_first_line_is_the_secret(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text("\n  " + "k" * 40 + "  \nignored\n")
    assert read_cluster_secret(path) == b"k" * 40


@pytest.mark.parametrize("content", ["", "\n\n", "short\n"])
def test_a_missing_or_short_secret_is_refused(tmp_path: Path, content: str) -> None:
    path = tmp_path / "secret"
    path.write_text(content)
    with pytest.raises(ValueError, match="at least 32 bytes"):
        read_cluster_secret(path)


def test_an_unreadable_or_huge_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot read"):
        read_cluster_secret(tmp_path / "absent")
    huge = tmp_path / "huge"
    huge.write_bytes(b"k" * (MAX_SECRET_FILE_BYTES + 1))
    with pytest.raises(ValueError, match="larger than"):
        read_cluster_secret(huge)
