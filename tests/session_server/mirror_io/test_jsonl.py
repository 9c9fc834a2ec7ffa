"""Lenient JSONL/JSON readers and atomic writes."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from session_server.mirror_io.jsonl import (
    append_bytes,
    atomic_write_bytes,
    atomic_write_json,
    encode_line,
    read_json,
    read_jsonl,
)


def test_read_jsonl_skips_bad_lines_naming_file_and_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a":1}\n   \n{"a":\n"str"\n\xff\n{"a":2}')
    with caplog.at_level(logging.WARNING):
        assert read_jsonl(path) == [{"a": 1}, {"a": 2}]
    for number, why in (
        (2, "blank"),
        (3, "malformed"),
        (4, "expected a JSON object"),
        (5, "malformed"),
    ):
        assert f"{path}:{number}: " in caplog.text and why in caplog.text
    assert read_jsonl(path, limit=1) == [{"a": 2}]
    assert read_jsonl(path, limit=0) == []
    assert read_jsonl(tmp_path / "missing.jsonl") == []


def test_read_json(tmp_path: Path) -> None:
    assert read_json(tmp_path / "none.json") is None
    (tmp_path / "a.json").write_text("[1]")
    assert read_json(tmp_path / "a.json") is None
    (tmp_path / "b.json").write_text('{"k": "é"}')
    assert read_json(tmp_path / "b.json") == {"k": "é"}


def test_writes_are_compact_and_atomic(tmp_path: Path) -> None:
    assert encode_line({"a": "é", "b": [1, 2.5]}) == '{"a":"é","b":[1,2.5]}\n'.encode()
    target = tmp_path / "deep" / "f.json"
    atomic_write_json(target, {"x": 1})
    atomic_write_bytes(target, b"new", fsync=False)
    assert target.read_bytes() == b"new"
    assert [p.name for p in target.parent.iterdir()] == ["f.json"]
    log = tmp_path / "d2" / "log.jsonl"
    append_bytes(log, b"1\n")
    append_bytes(log, b"")
    append_bytes(log, b"2\n", fsync=True)
    assert log.read_bytes() == b"1\n2\n"


def test_failed_atomic_write_leaves_old_file_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "f.json"
    target.write_text("old")
    with pytest.raises(TypeError):
        atomic_write_json(target, {"x": object()})
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]
