"""Export of one session in the flat reference root layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from session_server.mirror_io.export import default_snapshot_messages, export_session
from session_server.values.errors import InvalidAgentIdError
from session_server.values.events import ContextMessage, SessionEvent
from tests.session_server.mirror.factory import (
    agent,
    committed,
    compaction,
    ep,
    summarize_record,
    user,
)


def test_export_layout_files_only_when_non_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = committed([user("a"), agent("b")])
    out = export_session(tmp_path, "db manager_1", events)  # progress: auto (quiet when not a tty)
    assert out.folder == tmp_path / "agents" / "db manager_1"
    assert sorted(out.files) == ["raw_traces.jsonl", "working_context_snapshot.json"]
    assert sorted(p.name for p in out.folder.iterdir()) == sorted(out.files)
    assert out.trace_count == 2
    assert capsys.readouterr().err == ""
    snap = json.loads((out.folder / "working_context_snapshot.json").read_text())
    assert snap["agent_id"] == "db manager_1" and snap["epoch_id"] == 1 and snap["last_seq"] == 2
    assert [m["content"] for m in snap["messages"]] == ["a", "b"]
    assert not (out.folder / "working_context_snapshot.json").read_bytes().endswith(b"\n")


def test_re_export_removes_stale_files(tmp_path: Path) -> None:
    events = committed(
        [
            user("a"),
            agent("b"),
            compaction(summarize_record(["turn_0001"], [ep(1, ["turn_0001"])], [])),
        ]
    )
    first = export_session(tmp_path, "x", events, progress=False)
    assert {"raw_traces_archive.jsonl", "episodic.jsonl"} <= set(first.files)
    assert "raw_traces.jsonl" not in first.files  # every line was archived
    second = export_session(tmp_path, "x", committed([user("only")]), progress=False)
    assert sorted(p.name for p in second.folder.iterdir()) == [
        "raw_traces.jsonl",
        "working_context_snapshot.json",
    ]


def test_snapshot_messages_given_or_default(tmp_path: Path) -> None:
    events = committed(
        [
            SessionEvent(action="system_instruction", content="rule"),
            user("a"),
            compaction({"strategy": "compact"}),
        ]
    )
    assert [m.role for m in default_snapshot_messages(events)] == ["system", "user"]
    out = export_session(
        tmp_path,
        "x",
        events,
        messages=[ContextMessage(role="user", content="ctx")],
        system_instructions=["sys"],
        progress=False,
    )
    snap = json.loads((out.folder / "working_context_snapshot.json").read_text())
    assert [m["content"] for m in snap["messages"]] == ["sys", "ctx"]
    assert snap["epoch_id"] == 2 and snap["system_instruction_count"] == 1


def test_export_name_is_checked_before_writing(tmp_path: Path) -> None:
    with pytest.raises(InvalidAgentIdError):
        export_session(tmp_path, "../evil", committed([user("a")]))
    assert not (tmp_path / "agents").exists()
