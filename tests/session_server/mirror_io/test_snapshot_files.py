"""``drop_unbound_snapshot``: a snapshot file stays only when its bytes have the digest
SQLite vouches for (real files in a tmp dir)."""

from __future__ import annotations

from pathlib import Path

from session_server.mirror.snapshot import SNAPSHOT_FILE
from session_server.mirror_io.snapshot_files import drop_unbound_snapshot, snapshot_digest

DATA = b'{"schema_version":1,"messages":[{"role":"assistant","content":"secret"}]}'


def snapshot(tmp_path: Path, data: bytes = DATA) -> Path:
    path = tmp_path / SNAPSHOT_FILE
    path.write_bytes(data)
    return path


def test_a_bound_snapshot_stays(tmp_path: Path) -> None:
    path = snapshot(tmp_path)
    assert drop_unbound_snapshot(tmp_path, snapshot_digest(DATA)) is False
    assert path.read_bytes() == DATA


def test_a_snapshot_sqlite_vouches_for_none_of_goes(tmp_path: Path) -> None:
    path = snapshot(tmp_path)
    assert drop_unbound_snapshot(tmp_path, None) is True
    assert not path.exists()


def test_a_snapshot_with_other_bytes_than_bound_goes(tmp_path: Path) -> None:
    path = snapshot(tmp_path, DATA.replace(b"secret", b"edited"))
    assert drop_unbound_snapshot(tmp_path, snapshot_digest(DATA)) is True
    assert not path.exists()


def test_no_snapshot_nothing_removed(tmp_path: Path) -> None:
    assert drop_unbound_snapshot(tmp_path, None) is False
    assert drop_unbound_snapshot(tmp_path, snapshot_digest(DATA)) is False
