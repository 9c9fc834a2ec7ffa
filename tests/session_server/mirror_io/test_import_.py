"""Import of reference folders, and import -> export round trips over every fixture agent."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest

from session_server.mirror.model import render_mirror
from session_server.mirror_io.export import export_session
from session_server.mirror_io.import_ import find_reference_folder, import_reference_folder
from session_server.values.errors import InvalidParamsError
from session_server.values.events import SessionEvent
from session_server.values.turns import assign_turns
from tests.session_server.mirror.factory import ep, sem
from tests.support.paths import FIXTURES

AGENTS = sorted(p for p in (FIXTURES / "agents").iterdir() if p.is_dir())


def store_turns(events: list[SessionEvent]) -> list[SessionEvent]:
    """Fill ``turn`` the way the store does on append."""
    turns, _ = assign_turns(events)
    for ev, turn in zip(events, turns, strict=True):
        ev.turn = turn
    return events


def test_all_fixture_agents_are_present() -> None:
    assert len(AGENTS) == 16
    assert any(" " in p.name for p in AGENTS)


@pytest.mark.parametrize("agent", AGENTS, ids=lambda p: p.name)
def test_fixture_round_trip_is_byte_exact(agent: Path, tmp_path: Path) -> None:
    imported = import_reference_folder(agent, session_id="s1")
    events = store_turns(imported.events)
    out = export_session(tmp_path, agent.name, events, progress=False)
    assert out.folder == tmp_path / "agents" / agent.name
    original = (agent / "raw_traces.jsonl").read_bytes()
    assert (out.folder / "raw_traces.jsonl").read_bytes() == original
    # files only when non-empty, like the fixtures
    assert sorted(p.name for p in out.folder.iterdir()) == [
        "raw_traces.jsonl",
        "working_context_snapshot.json",
    ]
    # same traces field by field (order, types, contents, tools, ids, args, results, turns)
    got = [json.loads(x) for x in (out.folder / "raw_traces.jsonl").read_text().splitlines()]
    want = [json.loads(x) for x in original.decode().splitlines()]
    assert got == want


@pytest.mark.parametrize("agent", AGENTS, ids=lambda p: p.name)
def test_fixture_import_events(agent: Path) -> None:
    imported = import_reference_folder(agent, session_id="s1")
    events = imported.events
    assert imported.name == agent.name and imported.compaction is None
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    ids = [e.id for e in events]
    assert len(set(ids)) == len(ids)
    for ev in events:
        uuid.UUID(ev.id)
        assert ev.session_id == "s1"
        assert ev.metadata  # trace ids kept for export
    assert imported.snapshot is not None and imported.snapshot["agent_id"] == agent.name
    first_line = json.loads((agent / "raw_traces.jsonl").read_text().splitlines()[0])
    assert events[0].action == "user_message"
    assert events[0].metadata is not None
    assert events[0].metadata["trace"]["id"] == first_line["id"]


def test_tool_flow_becomes_one_assistant_step_with_calls() -> None:
    imported = import_reference_folder(FIXTURES / "agents" / "SingleAgentXml_Tester_1436")
    actions = [e.action for e in imported.events]
    assert actions == ["user_message", "tool_call_request", "tool_result", "agent_message"]
    request, res = imported.events[1], imported.events[2]
    assert request.content.startswith('<tool name="write_file">')
    assert request.tool_calls is not None and len(request.tool_calls) == 1
    call = request.tool_calls[0]
    assert call.id == "turn_b3c4a583b8d04fcda0793e863ac0f0c6:seg_1"
    assert call.arguments == {"path": "poem.txt", "content": "Roses are red.\n"}
    assert res.tool_call_id == call.id and res.is_success is True
    assert res.content == "File created/updated at poem.txt"
    # duplicate trace ids (call line and assistant line share one) are both kept
    assert request.metadata is not None
    assert request.metadata["call_traces"][0]["id"] == request.metadata["assistant_trace"]["id"]


def test_pending_call_and_int_ts_fixture() -> None:
    imported = import_reference_folder(FIXTURES / "agents" / "Worker_Worker_6761")
    assert [e.action for e in imported.events] == ["user_message", "tool_call_request"]
    assert imported.events[0].timestamp == 1770923021000
    assert imported.events[0].metadata == {"trace": {"id": "rt_1770923021000", "ts": 1770923021}}


def test_find_reference_folder_accepts_root_or_agent(tmp_path: Path) -> None:
    assert (
        find_reference_folder(FIXTURES / "agents" / "Worker_Worker_7782").name
        == "Worker_Worker_7782"
    )
    single = tmp_path / "one" / "agents" / "a b"
    single.mkdir(parents=True)
    (single / "raw_traces.jsonl").write_text("")
    assert find_reference_folder(tmp_path / "one") == single
    with pytest.raises(InvalidParamsError, match="16 agent folders"):
        find_reference_folder(FIXTURES)
    (tmp_path / "empty").mkdir()
    with pytest.raises(InvalidParamsError, match="no reference memory files"):
        find_reference_folder(tmp_path / "empty")
    with pytest.raises(InvalidParamsError, match="not a folder"):
        find_reference_folder(tmp_path / "missing")


def _write_jsonl(path: Path, rows: Sequence[object]) -> None:
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in rows))


def _line(tid: str, ts: object, turn: str, seq: int, kind: str, **kw: object) -> dict[str, object]:
    src = {
        "user": "LLMUserMessageReadyEvent",
        "assistant": "LLMCompleteResponseReceivedEvent",
        "tool_call": "PendingToolInvocationEvent",
        "tool_result": "ToolResultEvent",
    }[kind]
    line: dict[str, object] = {
        "id": tid,
        "ts": ts,
        "turn_id": turn,
        "seq": seq,
        "trace_type": kind,
        "content": kw.pop("content", ""),
        "source_event": src,
    }
    line.update(kw)
    return line


def test_archive_episodic_semantic_round_trip(tmp_path: Path) -> None:
    folder = tmp_path / "agents" / "mem agent"
    folder.mkdir(parents=True)
    archive = [
        _line("r1", 1.0, "turn_0001", 1, "user", content="old", tags=["processed"]),
        _line(
            "r2",
            2.0,
            "turn_0001",
            2,
            "tool_call",
            tool_name="t",
            tool_call_id="c1",
            tool_args={"a": 1},
        ),
        _line(
            "r3",
            2.0,
            "turn_0001",
            3,
            "tool_call",
            tool_name="t",
            tool_call_id="c2",
            tool_args={"a": 2},
        ),
        _line(
            "r4",
            3,
            "turn_0001",
            4,
            "tool_result",
            tool_name="t",
            tool_call_id="c1",
            tool_result={"ok": True},
        ),
        _line(
            "r5",
            3.5,
            "turn_0001",
            5,
            "tool_result",
            tool_name="t",
            tool_call_id="c2",
            tool_error="bad",
            correlation_id="x",
        ),
    ]
    active = [
        _line(
            "r6",
            4.0,
            "turn_0002",
            1,
            "user",
            content="new",
            media={"images": ["i.png"], "audio": [], "video": []},
            tags=["processed"],
        ),
        _line("r7", 5.0, "turn_0002", 2, "assistant", content="reply", tags=["final"]),
        _line(
            "r8",
            6.0,
            "turn_0002",
            3,
            "tool_result",
            tool_name="t",
            tool_call_id="zz",
            tool_result="42",
        ),
    ]
    episodic = [ep(1, ["turn_0001"])]
    semantic = [sem(1), sem(2)]
    _write_jsonl(folder / "raw_traces_archive.jsonl", archive)
    _write_jsonl(folder / "raw_traces.jsonl", active)
    _write_jsonl(folder / "episodic.jsonl", episodic)
    _write_jsonl(folder / "semantic.jsonl", semantic)
    imported = import_reference_folder(tmp_path, session_id="s2", first_seq=1)
    actions = [e.action for e in imported.events]
    assert actions == [
        "user_message",
        "tool_call_request",
        "tool_result",
        "tool_result",
        "compaction",
        "user_message",
        "agent_message",
        "tool_result",
    ]
    record = imported.compaction
    assert record is not None and imported.events[4].compaction == record
    assert record["strategy"] == "summarize" and record["turn_ids"] == ["turn_0001"]
    assert record["seq_range"] == [1, 4] and record["tail_start_seq"] == 6
    assert record["tail_start_turn"] == 2
    assert record["episodic"] == episodic and record["semantic"] == semantic
    assert imported.events[3].is_success is False and imported.events[3].content == "bad"
    assert imported.events[5].images == ["i.png"]
    assert imported.events[7].content == "42"

    events = store_turns(imported.events)
    out = export_session(tmp_path / "out", "mem agent", events, progress=False)
    for name in (
        "raw_traces.jsonl",
        "raw_traces_archive.jsonl",
        "episodic.jsonl",
        "semantic.jsonl",
    ):
        assert (out.folder / name).read_bytes() == (folder / name).read_bytes(), name
    snap = json.loads((out.folder / "working_context_snapshot.json").read_text())
    assert snap["epoch_id"] == 2 and snap["last_compaction_ts"] is not None


def test_malformed_lines_are_skipped_with_file_and_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "agent"
    folder.mkdir()
    good = _line("r1", 1.0, "turn_0001", 1, "user", content="hi")
    (folder / "raw_traces.jsonl").write_bytes(
        json.dumps(good).encode()
        + b"\n\n{broken\n[1,2]\n"
        + json.dumps({"trace_type": "weird"}).encode()
        + b"\n\xff\xfe\n"
        + json.dumps(_line("r2", "soon", "turn_0001", 2, "assistant", content="yo")).encode()
    )
    with caplog.at_level(logging.WARNING):
        imported = import_reference_folder(folder)
    assert [e.action for e in imported.events] == ["user_message", "agent_message"]
    assert imported.events[1].timestamp == imported.events[0].timestamp
    text = caplog.text
    path = str(folder / "raw_traces.jsonl")
    for number in (2, 3, 4, 5, 6, 7):
        assert f"{path}:{number}" in text, number
    # the last line's bad ts is kept for export
    events = store_turns(imported.events)
    lines = render_mirror(events).active
    assert lines[1]["ts"] == "soon" and lines[1]["id"] == "r2"


def test_snapshot_is_only_a_cache(tmp_path: Path) -> None:
    folder = tmp_path / "agent"
    folder.mkdir()
    _write_jsonl(folder / "raw_traces.jsonl", [_line("r1", 1.0, "turn_0001", 1, "user")])
    (folder / "working_context_snapshot.json").write_text("{not json")
    imported = import_reference_folder(folder)
    assert imported.snapshot is None and len(imported.events) == 1
