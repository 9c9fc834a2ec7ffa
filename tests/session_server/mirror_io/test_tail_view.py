"""A memory view with a limit reads the trace files from the end, only what it shows.

The proof that the head of a file is not read: the head holds malformed lines, which a
read logs as skipped; a limited view logs nothing and still shows the right lines.
Views built from the tail equal the tails of views built from the whole files, for
random histories (calls, results, orphans, an archive) and every limit.
"""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path
from typing import Any

import pytest

from session_server.mirror.view import MemoryViewOptions, build_memory_view, window_shows_tail
from session_server.mirror_io.jsonl import read_jsonl
from session_server.mirror_io.repair import ACTIVE_FILE, ARCHIVE_FILE
from session_server.mirror_io.tail import TailReader
from session_server.mirror_io.view_files import read_memory_folder, read_memory_view


def write_lines(path: Path, lines: list[dict[str, Any]], head: bytes = b"") -> None:
    path.write_bytes(head + b"".join(json.dumps(x).encode() + b"\n" for x in lines))


def history(rng: random.Random, n: int) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    calls: list[str] = []
    ts = 0.0
    for i in range(n):
        ts += rng.choice([0.0, 1.0])
        kind = rng.random()
        line: dict[str, Any]
        if kind < 0.4:
            line = {"trace_type": rng.choice(["user", "assistant"]), "content": "x" * (i % 7)}
        elif kind < 0.7:
            calls.append(f"c{i}")
            line = {"trace_type": "tool_call", "tool_call_id": f"c{i}", "tool_name": "t"}
        else:
            call = rng.choice([*calls, "never-called"])
            line = {"trace_type": "tool_result", "tool_call_id": call, "tool_result": "r"}
        line.update(ts=ts, turn_id=f"turn_{i + 1:04d}", seq=i + 1)
        lines.append(line)
    return lines


def test_tail_reader_yields_what_read_jsonl_reads_newest_first(tmp_path: Path) -> None:
    rng = random.Random(7)
    path = tmp_path / "f.jsonl"
    pieces = ['{"a":1}', "", "garbage", "[1]", '{"b":"x\\ny"}', '{"c":"' + "z" * 40 + '"}']
    for _ in range(300):
        text = "\n".join(rng.choice(pieces) for _ in range(rng.randint(0, 8)))
        path.write_text(text + rng.choice(["", "\n"]))
        for block in (1, 2, 3, 7, 64):
            with TailReader(path, block=block) as reader:
                newest_first = list(reader)
            assert newest_first[::-1] == read_jsonl(path), (text, block)


def test_a_missing_file_reads_as_empty(tmp_path: Path) -> None:
    with TailReader(tmp_path / "absent.jsonl") as reader:
        assert list(reader) == []
        assert reader.exhausted


@pytest.mark.parametrize("seed", range(40))
def test_limited_views_equal_the_tail_of_the_full_view(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    lines = history(rng, rng.randint(0, 50))
    cut = rng.randint(0, len(lines))
    write_lines(tmp_path / ARCHIVE_FILE, lines[:cut])
    write_lines(tmp_path / ACTIVE_FILE, lines[cut:])
    for raw_limit in (None, 1, 3, 8):
        for conv_limit in (None, 1, 2, 5):
            for collapse in (True, False):
                for archive in (True, False):
                    options = MemoryViewOptions(
                        raw_trace_limit=raw_limit,
                        conversation_limit=conv_limit,
                        collapse_tools=collapse,
                        include_archive=archive,
                    )
                    whole = MemoryViewOptions(collapse_tools=collapse, include_archive=archive)
                    tail = read_memory_folder(tmp_path, options)
                    full = read_memory_folder(tmp_path, whole)
                    assert build_memory_view(
                        "a", raw_active=tail.raw_active, raw_archive=tail.raw_archive,
                        options=options,
                    ) == build_memory_view(
                        "a", raw_active=full.raw_active, raw_archive=full.raw_archive,
                        options=options,
                    )  # fmt: skip


def test_a_limited_view_of_a_long_history_never_reads_its_head(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "agents" / "a" / "sessions" / "s"
    folder.mkdir(parents=True)
    lines = history(random.Random(1), 1_990)
    # The newest lines: messages (an orphan result among the shown entries would make
    # the view look further back for its call, correctly).
    last = lines[-1]["ts"]
    lines += [
        {"trace_type": "user", "content": "q", "ts": last + 1, "turn_id": "turn_1991", "seq": s}
        for s in range(1991, 2001)
    ]
    # Two megabytes of lines any read of the head would log as malformed.
    head = b"not json at all\n" * 131_072
    write_lines(folder / ACTIVE_FILE, lines, head=head)
    write_lines(folder / ARCHIVE_FILE, [], head=head)
    options = MemoryViewOptions(raw_trace_limit=10, conversation_limit=4)
    with caplog.at_level(logging.WARNING, logger="session_server.mirror"):
        view = read_memory_view(tmp_path, "a", session_id="s", options=options)
    assert [t["seq"] for t in view["raw_traces"]] == list(range(1991, 2001))
    assert len(view["conversation"]) == 4
    assert not [r for r in caplog.records if "skipped" in r.getMessage()]
    # The same view without limits reads everything, head included (the contrast).
    with caplog.at_level(logging.WARNING, logger="session_server.mirror"):
        read_memory_view(tmp_path, "a", session_id="s", options=MemoryViewOptions())
    assert [r for r in caplog.records if "skipped" in r.getMessage()]


def test_a_window_out_of_order_is_not_trusted() -> None:
    options = MemoryViewOptions(raw_trace_limit=2, include_conversation=False)
    ordered = [{"ts": 1.0, "turn_id": "turn_0001", "seq": 1}, {"ts": 2.0, "seq": 2}]
    assert window_shows_tail(ordered, options)
    assert not window_shows_tail(ordered[::-1], options)
    # Turn numbers order turns past 9999 (text order would put turn_10000 first).
    past = [{"ts": 1.0, "turn_id": "turn_9999"}, {"ts": 1.0, "turn_id": "turn_10000"}]
    assert window_shows_tail(past, options)


def test_an_edited_file_out_of_order_is_read_whole(tmp_path: Path) -> None:
    lines = history(random.Random(3), 30)
    lines[-1]["ts"] = -5.0  # an edit: the newest line in the file is the oldest by time
    write_lines(tmp_path / ACTIVE_FILE, lines)
    options = MemoryViewOptions(raw_trace_limit=3, include_conversation=False)
    tail = read_memory_folder(tmp_path, options)
    full = read_memory_folder(tmp_path, MemoryViewOptions())
    assert build_memory_view("a", raw_active=tail.raw_active, options=options) == (
        build_memory_view("a", raw_active=full.raw_active, options=options)
    )
