"""Streamed mirror repair on real files: equal to the in-memory rendering, one temporary
file at a time, bounded memory; orphan sweep and session folder removal."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from pathlib import Path

from session_server.mirror.model import MirrorModel
from session_server.mirror_io.repair import (
    ACTIVE_FILE,
    ARCHIVE_FILE,
    TRASH_DIR,
    ListSource,
    remove_session_folder,
    repair_session_files,
    sweep_orphans,
)
from session_server.values.events import SessionEvent
from tests.session_server.mirror.factory import agent, committed, compaction, ep, sem, user
from tests.support.mirror_check import expected_mirror

from ..mirror.test_streaming import build_any


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def history() -> list[SessionEvent]:
    plain = [ev for n in range(1, 9) for ev in (user(f"q{n}"), agent(f"a{n}"))]
    events = committed(plain[:8])
    record = {
        "strategy": "summarize",
        "turn_ids": ["turn_0001", "turn_0002"],
        "episodic": [ep(1, ["turn_0001", "turn_0002"])],
        "semantic": [sem(1), sem(2)],
    }
    events += committed([compaction(record)], start=9, history=events)
    events += committed(plain[8:], start=10, history=events)
    return events


class WatchedSource(ListSource):
    """Counts the temporary files in the folder while each pass runs."""

    def __init__(self, events: list[SessionEvent], folder: Path) -> None:
        super().__init__(events)
        self.folder = folder
        self.most_temps = 0

    def events(self) -> Iterator[SessionEvent]:
        for event in super().events():
            if self.folder.is_dir():
                temps = len(list(self.folder.glob(".*.tmp")))
                self.most_temps = max(self.most_temps, temps)
            yield event


def test_repair_rewrites_truncated_and_corrupted_files_one_at_a_time(tmp_path: Path) -> None:
    events = history()
    expected = expected_mirror(events)
    assert ARCHIVE_FILE in expected and "episodic.jsonl" in expected
    folder = tmp_path / "s1"
    folder.mkdir()
    for name, data in expected.items():
        (folder / name).write_bytes(data)
    (folder / ACTIVE_FILE).write_bytes(expected[ACTIVE_FILE][:-17])  # truncated mid-line
    archive = bytearray(expected[ARCHIVE_FILE])
    archive[10:20] = b"\x00" * 10  # corrupted in place, same size
    (folder / ARCHIVE_FILE).write_bytes(bytes(archive))
    (folder / "semantic.jsonl").unlink()  # lost
    (folder / ".raw_traces.jsonl.x.tmp").write_bytes(b"left by a crash")
    source = WatchedSource(events, folder)
    changed, model = repair_session_files(folder, source)
    assert sorted(changed) == sorted([ACTIVE_FILE, ARCHIVE_FILE, "semantic.jsonl"])
    assert files(folder) == expected
    assert source.most_temps <= 1  # free space for one file, never more
    full = MirrorModel.from_events(events)
    assert (model.last_seq, model.epoch_id) == (full.last_seq, full.epoch_id)
    # Nothing to do the second time; the files are not even rewritten.
    stamps = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    assert repair_session_files(folder, ListSource(events))[0] == []
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == stamps


def test_repair_removes_files_that_should_be_empty(tmp_path: Path) -> None:
    folder = tmp_path / "s1"
    folder.mkdir()
    (folder / "episodic.jsonl").write_text('{"id":"stale"}\n')
    events = committed([user("q"), agent("a")])
    changed, _ = repair_session_files(folder, ListSource(events))
    assert changed == [ACTIVE_FILE, "episodic.jsonl"]
    assert files(folder) == expected_mirror(events)


def test_out_of_order_archives_are_sorted(tmp_path: Path) -> None:
    steps = [("user", "a"), ("agent", "b"), ("user", "c"), ("agent", "d"), ("user", "e")]
    events = build_any([*steps, ("any_summary", {2}), ("any_summary", {1})])
    expected = expected_mirror(events)
    repair_session_files(tmp_path / "s", ListSource(events))
    assert files(tmp_path / "s") == expected


def generated(count: int) -> Iterator[SessionEvent]:
    """``count`` events of 4 KB each, made as they are read (never all in memory)."""
    prior: list[SessionEvent] = []
    for seq in range(1, count + 1):
        ev = (user if seq % 2 else agent)(f"{seq:08d}" + "x" * 4000)
        [ev] = committed([ev], start=seq, history=prior)
        prior = [ev] if seq % 2 else []  # the turn numbering needs the open turn only
        ev.turn = (seq + 1) // 2
        yield ev


class GeneratedSource:
    def __init__(self, count: int) -> None:
        self.count = count

    def compactions(self) -> Iterator[SessionEvent]:
        return iter(())

    def events(self) -> Iterator[SessionEvent]:
        return generated(self.count)


def test_repair_memory_does_not_grow_with_history(tmp_path: Path) -> None:
    count = 8_000  # 32 MB of text if it were held
    tracemalloc.start()
    try:
        changed, model = repair_session_files(tmp_path / "s", GeneratedSource(count))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert changed == [ACTIVE_FILE]
    assert model.last_seq == count
    assert (tmp_path / "s" / ACTIVE_FILE).stat().st_size > 32_000_000
    assert peak < 12 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB"


def test_folder_removal_and_orphan_sweep(tmp_path: Path) -> None:
    agent_dir = tmp_path / "agent"
    for name in ("kept", "gone", "also-gone"):
        (agent_dir / "sessions" / name).mkdir(parents=True)
        (agent_dir / "sessions" / name / ACTIVE_FILE).write_text("{}\n")
    (agent_dir / TRASH_DIR / "half-removed").mkdir(parents=True)
    removed = sweep_orphans(agent_dir, lambda names: sorted(n for n in names if n != "kept"))
    assert removed == ["also-gone", "gone"]
    assert [p.name for p in (agent_dir / "sessions").iterdir()] == ["kept"]
    assert not (agent_dir / TRASH_DIR).exists()
    remove_session_folder(agent_dir, agent_dir / "sessions" / "kept")
    remove_session_folder(agent_dir, agent_dir / "sessions" / "never-there")
    assert list((agent_dir / "sessions").iterdir()) == []
    assert not (agent_dir / TRASH_DIR).exists()
