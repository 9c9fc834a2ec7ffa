"""Export and import through the actor: every reference fixture round-trips (real files)."""

from __future__ import annotations

from pathlib import Path

import pytest

from session_server import ActorRegistry
from session_server.core.errors import InvalidParamsError, NotFoundError
from session_server.runtime.transfer import (
    export_files,
    export_session,
    import_files,
    import_session,
)

FIXTURES = Path(__file__).resolve().parents[4] / "shared" / "fixtures" / "reference-memory"
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
