"""Reading memory folders for the view and the snapshot index."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

from session_server.mirror.view import MemoryViewOptions
from session_server.mirror_io.view_files import (
    list_snapshots,
    read_memory_folder,
    read_memory_view,
    resolve_memory_folder,
)
from session_server.mirror_io.writer import MirrorWriter
from session_server.values.errors import NotFoundError
from tests.session_server.mirror.factory import agent, calls, committed, user
from tests.support.paths import FIXTURES


def test_view_of_a_reference_fixture_folder() -> None:
    view = read_memory_view(FIXTURES, "Worker_Worker_6761")
    assert view["agent_id"] == "Worker_Worker_6761" and view["session_id"] is None
    assert [m["role"] for m in view["working_context"]] == ["system", "user", "assistant"]
    assert view["episodic"] == [] and view["semantic"] == []
    assert [c["kind"] for c in view["conversation"]] == ["message", "tool_call_pending", "message"]
    assert [r["trace_type"] for r in view["raw_traces"]] == ["user", "tool_call", "assistant"]
    assert view["raw_traces"][0]["ts"] == 1770923021.0
    full = read_memory_view(FIXTURES, "SingleAgent_Tester_9380")
    call = [c for c in full["conversation"] if c["kind"] == "tool_call"]
    assert call[0]["tool_result"] == "File created/updated at poem.txt"


def test_view_of_a_session_written_by_the_writer(tmp_path: Path) -> None:
    writer = MirrorWriter(tmp_path, "my agent")
    writer.append("s1", committed([user("q"), calls(("c1", "t", {"a": 1})), agent("a")]))
    view = read_memory_view(tmp_path, "my agent", session_id="s1")
    assert view["session_id"] == "s1" and view["working_context"] is None
    assert [c["kind"] for c in view["conversation"]] == ["message", "tool_call_pending", "message"]
    assert resolve_memory_folder(tmp_path, "my agent") == writer.session_dir("s1")
    with pytest.raises(NotFoundError, match="session_id"):
        read_memory_view(tmp_path, "my agent", session_id="nope")
    with pytest.raises(NotFoundError, match="no memory files"):
        read_memory_view(tmp_path, "nobody")


def test_missing_and_malformed_files(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "agents" / "a"
    folder.mkdir(parents=True)
    (folder / "episodic.jsonl").write_text('{"id":"e1"}\n\nnot json\n')
    (folder / "working_context_snapshot.json").write_text('{"schema_version": "x"}')
    with caplog.at_level(logging.WARNING):
        files = read_memory_folder(folder)
    assert files.episodic == [{"id": "e1"}] and files.snapshot is None
    assert files.raw_active == [] and files.raw_archive == [] and files.semantic == []
    assert f"{folder / 'episodic.jsonl'}:2" in caplog.text
    assert f"{folder / 'episodic.jsonl'}:3" in caplog.text
    only = read_memory_folder(folder, MemoryViewOptions(include_episodic=False))
    assert only.episodic == []


def test_list_snapshots_over_flat_and_session_folders(tmp_path: Path) -> None:
    shutil.copytree(
        FIXTURES / "agents" / "db manager_db manager_1393",
        tmp_path / "agents" / "db manager_db manager_1393",
    )
    writer = MirrorWriter(tmp_path, "worker")
    writer.append("s1", committed([user("q")]))
    writer.append("s2", committed([user("q")]))
    os.utime(writer.session_dir("s1") / "raw_traces.jsonl", (4e9, 4e9))
    (tmp_path / "agents" / "empty agent" / "sessions" / "s0").mkdir(parents=True)
    page = list_snapshots(tmp_path)
    assert next((e["agent_id"], e["session_id"]) for e in page["entries"]) == ("worker", "s1")
    assert page["total"] == 3
    flat = next(e for e in page["entries"] if e["session_id"] is None)
    assert flat["has_raw_traces"] and flat["has_working_context"] and not flat["has_episodic"]
    assert list_snapshots(tmp_path, search="DB MAN")["total"] == 1
    assert list_snapshots(tmp_path, page=2, page_size=2)["entries"][0]["agent_id"] in {
        "worker",
        "db manager_db manager_1393",
    }
    assert list_snapshots(tmp_path / "nothing")["total"] == 0
