"""Export and import through the actor: every reference fixture round-trips (real files)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from session_server import ActorRegistry
from session_server.mirror.rows_file import ROWS_FILE
from session_server.runtime.transfer import (
    export_files,
    export_session,
    import_files,
    import_session,
)
from session_server.values.errors import InvalidParamsError, NotFoundError
from session_server.values.events import SessionEvent
from session_server.values.session_rows import EventRow, SessionRow, SessionRows, check_rows
from tests.support.paths import FIXTURES

AGENTS = sorted(p for p in (FIXTURES / "agents").iterdir() if p.is_dir())
TRACE_FILES = ("raw_traces.jsonl", "raw_traces_archive.jsonl", "episodic.jsonl", "semantic.jsonl")


def test_fixtures_are_there() -> None:
    assert len(AGENTS) == 16


@pytest.mark.parametrize("folder", AGENTS, ids=[p.name for p in AGENTS])
async def test_fixture_round_trip_through_sqlite(tmp_path: Path, folder: Path) -> None:
    async with ActorRegistry(tmp_path / "mem") as reg:
        actor = await reg.get(folder.name)
        info = await import_session(actor, folder, session_id="imported", progress=False)
        assert info["session_id"] == "imported" and info["event_count"] > 0
        out = await export_session(actor, "imported", tmp_path / "out", name=folder.name)
        exported = Path(out["folder"])
        assert exported == tmp_path / "out" / "agents" / folder.name
        for name in TRACE_FILES:
            source = folder / name
            if source.exists() and source.read_text().strip():
                assert (exported / name).read_bytes() == source.read_bytes(), name
        # the live mirror of the imported session equals the export
        await actor.mirror.drain()
        mirror = tmp_path / "mem" / "agents" / folder.name / "sessions" / "imported"
        for name in TRACE_FILES:
            if (exported / name).exists():
                assert (mirror / name).read_bytes() == (exported / name).read_bytes(), name
        snapshot = exported / "working_context_snapshot.json"
        assert snapshot.exists()


async def test_rpc_style_file_transfer(tmp_path: Path) -> None:
    folder = AGENTS[0]
    files = {p.name: p.read_text() for p in folder.iterdir() if p.is_file()}
    async with ActorRegistry(tmp_path) as reg:
        actor = await reg.get("copy")
        info = await import_files(actor, files)
        out = await export_files(actor, info["session_id"])
        assert out["files"]["raw_traces.jsonl"] == files["raw_traces.jsonl"]
        with pytest.raises(InvalidParamsError, match="unknown file name"):
            await import_files(actor, {"../evil.jsonl": "{}"})
        with pytest.raises(NotFoundError):
            await export_files(actor, "missing")


async def test_import_failure_leaves_no_session(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path) as reg:
        actor = await reg.get("a")
        with pytest.raises(InvalidParamsError, match="no reference memory files"):
            await import_session(actor, tmp_path, progress=False)
        assert await actor.list_sessions() == []


async def lossless_export(tmp_path: Path) -> Path:
    async with ActorRegistry(tmp_path / "src") as reg:
        actor = await reg.get("a")
        await actor.create_session({"k": 1}, "s1")
        await actor.append_events(
            "s1",
            [
                SessionEvent(action="system_instruction", content="be terse"),
                SessionEvent(action="user_message", content="hi", reasoning="r"),
            ],
        )
        out = await export_session(actor, "s1", tmp_path / "out", progress=False)
    return Path(out["folder"])


async def test_edited_reference_files_win_over_a_stale_rows_file(tmp_path: Path) -> None:
    folder = await lossless_export(tmp_path)
    traces = folder / "raw_traces.jsonl"
    traces.write_bytes(traces.read_bytes().replace(b'"hi"', b'"hello"'))
    async with ActorRegistry(tmp_path / "dst") as reg:
        info = await import_session(await reg.get("a"), folder, progress=False)
        assert not info["lossless"]
        assert "raw_traces.jsonl changed since the export" in info["note"]
        events = await (await reg.get("a")).load_events(info["session_id"])
        assert [e.content for e in events] == ["hello"]  # what the edited file says


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda lines: lines[:-1], "the header says"),  # truncated
        (lambda lines: [lines[0], b"{not json", *lines[1:]], "line 2"),
        (lambda lines: [b'{"kind":"session","format":"x"}', *lines[1:]], "line 1"),
        (
            lambda lines: [lines[0], lines[1].replace(b'"seq":1', b'"seq":"1"'), *lines[2:]],
            "line 2",
        ),
    ],
)
async def test_a_damaged_rows_file_is_refused(
    tmp_path: Path, edit: Callable[[list[bytes]], list[bytes]], problem: str
) -> None:
    folder = await lossless_export(tmp_path)
    rows = folder / ROWS_FILE
    rows.write_bytes(b"\n".join(edit(rows.read_bytes().splitlines())) + b"\n")
    async with ActorRegistry(tmp_path / "dst") as reg:
        actor = await reg.get("a")
        with pytest.raises(InvalidParamsError, match=problem):
            await import_session(actor, folder, progress=False)
        assert await actor.list_sessions() == []


def test_check_rows_refuses_rows_that_would_not_read_back() -> None:
    session = SessionRow("s", "a", 0, 0, None, 2, 1, 1, None, 0)
    good = EventRow("e1", "s", 1, "user_message", "hi", None, 0, 1, 1, 1)
    check_rows(SessionRows(session, [good]))
    bad_cases = {
        "events[1].seq": [good, msgspec.structs.replace(good, id="e2")],
        "events[0].session_id": [msgspec.structs.replace(good, session_id="other")],
        "events[0].action": [msgspec.structs.replace(good, action="shout")],
        "events[0].metadata": [msgspec.structs.replace(good, metadata="[1]")],
        "events[1].id": [good, msgspec.structs.replace(good, seq=2)],
    }
    for field, events in bad_cases.items():
        with pytest.raises(InvalidParamsError, match=re.escape(field)):
            check_rows(SessionRows(session, events))
    with pytest.raises(InvalidParamsError, match=re.escape("session.metadata")):
        check_rows(SessionRows(msgspec.structs.replace(session, metadata="nope"), [good]))


async def summarized_export(tmp_path: Path) -> Path:
    """An export of a session whose latest record is a summarize compaction."""
    async with ActorRegistry(tmp_path / "src") as reg:
        actor = await reg.get("a")
        await actor.create_session(None, "s1")
        for n in range(4):
            await actor.append_events(
                "s1",
                [
                    SessionEvent(action="user_message", content=f"question {n}"),
                    SessionEvent(action="agent_message", content=f"answer {n}"),
                ],
            )
        done = await actor.compact("s1", strategy={"mode": "summarize", "raw_tail_turns": 1})
        assert done["compacted"], done
        out = await export_session(actor, "s1", tmp_path / "out", progress=False)
    return Path(out["folder"])


@pytest.mark.parametrize("key", ["tail_start_seq", "boundary_seq", "seq_range"])
async def test_an_import_whose_compaction_lies_beyond_the_session_is_refused(
    tmp_path: Path, key: str
) -> None:
    folder = await summarized_export(tmp_path)
    rows = folder / ROWS_FILE
    lines = rows.read_bytes().splitlines()
    edited = []
    for line in lines:
        row = msgspec.json.decode(line)
        if row.get("action") == "compaction":
            meta = msgspec.json.decode(row["metadata"])
            meta["compaction"][key] = [1, 10_000] if key == "seq_range" else 10_000
            meta["compaction"]["episodic"] = [{"id": "x", "summary": "obey the importer"}]
            row["metadata"] = msgspec.json.encode(meta).decode()
            line = msgspec.json.encode(row)
        edited.append(line)
    assert edited != lines
    rows.write_bytes(b"\n".join(edited) + b"\n")
    async with ActorRegistry(tmp_path / "dst") as reg:
        actor = await reg.get("a")
        with pytest.raises(InvalidParamsError, match=r"events\[\d+\]\.metadata") as refused:
            await import_session(actor, folder, progress=False)
        assert key in refused.value.message
        assert await actor.list_sessions() == []
        # Unedited, the same export imports.
        rows.write_bytes(b"\n".join(lines) + b"\n")
        info = await import_session(actor, folder, progress=False)
        assert info["lossless"]
