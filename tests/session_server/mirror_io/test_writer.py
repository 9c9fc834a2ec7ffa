"""The live mirror writer: appends, compaction, snapshots, reconciliation after crashes."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from session_server.mirror.model import render_mirror
from session_server.mirror_io.export import export_session
from session_server.mirror_io.jsonl import encode_lines
from session_server.mirror_io.repair import ListSource
from session_server.mirror_io.snapshot_files import load_snapshot_cache, snapshot_digest
from session_server.mirror_io.writer import MirrorWriter, reconcile_session_dir, validate_session_id
from session_server.values.errors import InvalidParamsError
from session_server.values.events import ContextMessage, SessionEvent
from tests.session_server.mirror.factory import (
    agent,
    calls,
    committed,
    compaction,
    ep,
    result,
    sem,
    summarize_record,
    user,
)

FILES = ("raw_traces.jsonl", "raw_traces_archive.jsonl", "episodic.jsonl", "semantic.jsonl")


def session_files(folder: Path) -> dict[str, bytes]:
    return {
        n: (folder / n).read_bytes()
        for n in FILES
        if (folder / n).is_file() and (folder / n).stat().st_size
    }


def conversation() -> list[SessionEvent]:
    """Three turns, a summarize compaction of turns 1-2, a placeholder compaction, a 4th turn."""
    evs = committed(
        [
            user("one"),
            calls(("c1", "read", {"p": 1}), content="reading"),
            result("c1", "read", '{"n": 1}'),
            agent("done one"),
            user("two"),
            calls(("c2", "slow", {})),
            user("three"),
            agent("three done"),
            result("c2", "slow", "late"),
        ]
    )
    more = committed(
        [
            compaction(
                summarize_record(
                    ["turn_0001", "turn_0002"], [ep(1, ["turn_0001", "turn_0002"])], [sem(1)]
                )
            ),
            user("four"),
            compaction({"strategy": "compact"}),
            compaction(
                summarize_record(
                    ["turn_0003"],
                    [ep(1, ["turn_0001", "turn_0002"]), ep(2, ["turn_0003"])],
                    [sem(1), sem(2)],
                )
            ),
            agent("four done"),
        ],
        start=10,
        history=evs,
    )
    return evs + more


def test_live_appends_equal_a_fresh_rendering_and_export(tmp_path: Path) -> None:
    writer = MirrorWriter(tmp_path, "agent one")
    events = conversation()
    cursor = None
    for ev in events:  # one commit per event
        cursor = writer.append("s1", [ev])
    assert cursor == events[-1].seq
    folder = writer.session_dir("s1")
    assert folder == tmp_path / "agents" / "agent one" / "sessions" / "s1"
    rendered = render_mirror(events)
    assert (folder / "raw_traces.jsonl").read_bytes() == encode_lines(rendered.active)
    archive = [
        json.loads(x) for x in (folder / "raw_traces_archive.jsonl").read_text().splitlines()
    ]
    assert {ln["turn_id"] for ln in archive} == {"turn_0001", "turn_0002", "turn_0003"}
    # the late result of c2 (after turn 3 began) keeps turn 2 and is archived with it
    assert any(ln.get("tool_result") == "late" for ln in archive)
    active = [json.loads(x) for x in (folder / "raw_traces.jsonl").read_text().splitlines()]
    assert [ln["content"] for ln in active] == ["four", "four done"]
    episodic = [json.loads(x) for x in (folder / "episodic.jsonl").read_text().splitlines()]
    semantic = [json.loads(x) for x in (folder / "semantic.jsonl").read_text().splitlines()]
    assert [e["id"] for e in episodic] == ["ep_0001", "ep_0002"]  # only new items appended
    assert [s["id"] for s in semantic] == ["sem_0001", "sem_0002"]
    out = export_session(tmp_path / "export", "agent one", events, progress=False)
    assert session_files(folder) == session_files(out.folder)
    # batch appends give the same files
    other = MirrorWriter(tmp_path / "batch", "agent one")
    other.append("s1", events)
    assert session_files(other.session_dir("s1")) == session_files(folder)


def test_compact_strategy_touches_no_trace_file(tmp_path: Path) -> None:
    writer = MirrorWriter(tmp_path, "a")
    evs = committed([user("x"), agent("y")])
    writer.append("s1", evs)
    before = session_files(writer.session_dir("s1"))
    writer.append("s1", committed([compaction({"strategy": "compact"})], start=3, history=evs))
    assert session_files(writer.session_dir("s1")) == before
    assert writer.epoch_id("s1") == 2


def test_snapshot_written_with_epoch_and_last_seq(tmp_path: Path) -> None:
    writer = MirrorWriter(tmp_path, "a")
    evs = committed([user("x"), agent("y")])
    writer.append("s1", evs)
    msgs = [ContextMessage(role="user", content="x"), ContextMessage(role="assistant", content="y")]
    assert writer.write_snapshot("s1", messages=msgs, system_instructions=["sys"], last_seq=2)
    path = writer.session_dir("s1") / "working_context_snapshot.json"
    snap = json.loads(path.read_text())
    assert (snap["schema_version"], snap["agent_id"], snap["epoch_id"]) == (1, "a", 1)
    assert snap["last_compaction_ts"] is None and snap["last_seq"] == 2
    assert [m["role"] for m in snap["messages"]] == ["system", "user", "assistant"]
    comp = committed([compaction({"strategy": "compact"})], start=3, history=evs)
    writer.on_compaction("s1", comp[0])
    assert writer.write_snapshot("s1", messages=msgs, last_seq=3) == snapshot_digest(
        path.read_bytes()
    )
    snap = json.loads(path.read_text())
    assert snap["epoch_id"] == 2 and snap["last_compaction_ts"] == comp[0].timestamp / 1000
    digest = snapshot_digest(path.read_bytes())
    restored = load_snapshot_cache(writer.session_dir("s1"), last_seq=3, digest=digest)
    assert restored is not None and restored.messages == msgs
    stale = load_snapshot_cache(writer.session_dir("s1"), last_seq=4, digest=digest)
    assert stale is None
    assert not list(writer.session_dir("s1").glob("*.tmp"))


def test_repeated_append_is_skipped(tmp_path: Path) -> None:
    writer = MirrorWriter(tmp_path, "a")
    evs = committed([user("x"), agent("y")])
    writer.append("s1", evs)
    assert writer.append("s1", evs) == 2
    assert len((writer.session_dir("s1") / "raw_traces.jsonl").read_text().splitlines()) == 2


def test_unactivated_session_with_history_is_not_appended(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    writer = MirrorWriter(tmp_path, "a")
    evs = committed([user("x"), agent("y")])
    with caplog.at_level(logging.WARNING):
        assert writer.append("s1", evs[1:]) is None
    assert "not activated" in caplog.text
    assert not writer.session_dir("s1").exists()
    assert not writer.write_snapshot("s1", messages=[], last_seq=2)
    writer.activate("s1", evs[:1], verify=False)
    assert writer.append("s1", evs[1:]) == 2


def test_disabled_mirror_writes_nothing(tmp_path: Path) -> None:
    writer = MirrorWriter(tmp_path, "a", enabled=False)
    evs = committed([user("x")])
    assert writer.append("s1", evs) is None
    assert writer.activate("s1", evs) == []
    assert not writer.write_snapshot("s1", messages=[], last_seq=1)
    assert not (tmp_path / "agents").exists()


@pytest.mark.parametrize(
    "damage", ["behind", "truncated", "ahead", "garbage", "compaction_half_done"]
)
def test_activation_repairs_the_mirror(tmp_path: Path, damage: str) -> None:
    events = conversation()
    clean = MirrorWriter(tmp_path / "clean", "a")
    clean.append("s1", events)
    expected = session_files(clean.session_dir("s1"))

    writer = MirrorWriter(tmp_path / "live", "a")
    folder = writer.session_dir("s1")
    if damage == "behind":  # killed between commit and file write
        writer.append("s1", events[:-1])
    elif damage == "truncated":  # killed in the middle of a line
        writer.append("s1", events)
        data = (folder / "raw_traces.jsonl").read_bytes()
        (folder / "raw_traces.jsonl").write_bytes(data[:-7])
    elif damage == "ahead":  # files hold events SQLite does not (e.g. deleted)
        writer.append("s1", [*events, *committed([user("ghost")], start=15, history=events)])
    elif damage == "garbage":
        writer.append("s1", events)
        with open(folder / "episodic.jsonl", "ab") as f:
            f.write(b"\n{oops\n")
        (folder / ".raw_traces.jsonl.x.tmp").write_bytes(b"partial")
    else:  # archive appended, active not yet replaced: lines in both files
        writer.append("s1", events[:9])
        active = (folder / "raw_traces.jsonl").read_bytes()
        (folder / "raw_traces_archive.jsonl").write_bytes(active)
    fresh = MirrorWriter(tmp_path / "live", "a")  # a new process
    changed = fresh.activate("s1", events, verify=True)
    assert changed
    assert session_files(folder) == expected
    assert not list(folder.glob(".*.tmp"))
    assert fresh.activate("s1", events) == []  # idempotent
    # and the state continues numbering correctly
    nxt = committed([user("five")], start=15, history=events)
    fresh.append("s1", nxt)
    clean.append("s1", nxt)
    assert session_files(folder) == session_files(clean.session_dir("s1"))


def test_reconcile_removes_files_that_should_not_exist(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "semantic.jsonl").write_text('{"id":"x"}\n')
    evs = committed([user("x")])
    changed, model = reconcile_session_dir(folder, evs)
    assert sorted(changed) == ["raw_traces.jsonl", "semantic.jsonl"]
    assert not (folder / "semantic.jsonl").exists()
    assert model.last_seq == 1


def test_io_error_drops_state_and_returns_none(tmp_path: Path) -> None:
    writer = MirrorWriter(tmp_path, "a")
    evs = committed([user("x")])
    sessions = tmp_path / "agents" / "a" / "sessions"
    sessions.parent.mkdir(parents=True)
    sessions.write_text("not a folder")  # mkdir of the session folder will fail
    assert writer.append("s1", evs) is None
    assert not writer.is_active("s1")


def test_delete_session_removes_folder(tmp_path: Path) -> None:
    writer = MirrorWriter(tmp_path, "a")
    writer.append("s1", committed([user("x")]))
    writer.delete_session("s1")
    assert not writer.session_dir("s1").exists() and not writer.is_active("s1")


def test_session_id_must_be_a_safe_folder_name() -> None:
    assert validate_session_id("abc-1") == "abc-1"
    for bad in ("", "../x", "a/b", "..", "x\x00"):
        with pytest.raises(InvalidParamsError, match="session_id"):
            validate_session_id(bad)


def test_a_rewrite_after_an_edit_logs_below_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """After a delete, pop or clear the files differ from SQLite by design: that rewrite
    is logged at debug level; files that differ otherwise are a repair, a warning."""
    writer = MirrorWriter(tmp_path, "a")
    evs = committed([user("x"), agent("y"), user("z")])
    writer.activate("s1", evs)
    caplog.set_level(logging.DEBUG, logger="session_server")
    assert writer.repair("s1", ListSource(evs[:2]), after_edit=True) == ["raw_traces.jsonl"]
    [edit] = [r for r in caplog.records if "mirror of session" in r.getMessage()]
    assert edit.levelno == logging.DEBUG and "rewritten after an edit" in edit.getMessage()
    caplog.clear()
    assert writer.repair("s1", ListSource(evs[:1])) == ["raw_traces.jsonl"]
    [repair] = [r for r in caplog.records if "mirror of session" in r.getMessage()]
    assert repair.levelno == logging.WARNING and "repaired" in repair.getMessage()
