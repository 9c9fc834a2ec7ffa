"""Property: live mirror == fresh rendering == export, and export -> import -> export is exact."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from session_server.mirror_io.export import export_session
from session_server.mirror_io.import_ import import_reference_folder
from session_server.mirror_io.writer import MirrorWriter
from session_server.values.events import SessionEvent
from session_server.values.turns import assign_turns

from .factory import agent, calls, committed, compaction, ep, result, sem, user

FILES = ("raw_traces.jsonl", "raw_traces_archive.jsonl", "episodic.jsonl", "semantic.jsonl")

text = st.text(max_size=12)
step = st.one_of(
    st.tuples(st.just("user"), text),
    st.tuples(st.just("agent"), text),
    st.tuples(st.just("calls"), st.integers(1, 3), text),
    st.tuples(
        st.just("result"), st.booleans(), st.sampled_from(["ok", "[1,2]", '{"a":1}', "7", ""])
    ),
    st.tuples(st.just("summarize"), st.integers(0, 3)),
    st.tuples(st.just("compact")),
)


def build(steps: list[tuple[object, ...]]) -> list[SessionEvent]:
    events: list[SessionEvent] = []
    pending: list[str] = []
    n_calls = 0
    n_items = 0
    for s in steps:
        kind = s[0]
        if kind == "user":
            ev = user(str(s[1]))
        elif kind == "agent":
            ev = agent(str(s[1]))
        elif kind == "calls":
            ids = [f"c{n_calls + i}" for i in range(int(str(s[1])))]
            n_calls += len(ids)
            pending.extend(ids)
            ev = calls(*[(i, "tool", {"i": i}) for i in ids], content=str(s[2]))
        elif kind == "result":
            call_id = pending.pop(0) if pending else "orphan"
            ev = result(call_id, "tool", str(s[2]), ok=bool(s[1]))
        elif kind == "summarize":
            turns, _ = assign_turns(events)
            keep = int(str(s[1]))
            last = max(turns, default=0)
            covered = [f"turn_{t:04d}" for t in range(0, max(0, last - keep) + 1)]
            n_items += 1
            ev = compaction(
                {
                    "strategy": "summarize",
                    "turn_ids": covered,
                    "episodic": [ep(i, covered) for i in range(1, n_items + 1)],
                    "semantic": [sem(i) for i in range(1, n_items + 1)],
                }
            )
        else:
            ev = compaction({"strategy": "compact"})
        events.append(ev)
    return committed(events)


def files(folder: Path) -> dict[str, bytes]:
    out = {}
    for name in FILES:
        path = folder / name
        if path.is_file() and path.stat().st_size:
            out[name] = path.read_bytes()
    return out


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, max_size=25))
def test_mirror_export_import_round_trip(steps: list[tuple[object, ...]]) -> None:
    events = build(steps)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        writer = MirrorWriter(root / "memory", "a")
        for ev in events:
            writer.append("s1", [ev])
        live = files(writer.session_dir("s1"))
        first = export_session(root / "out1", "a", events, progress=False)
        assert files(first.folder) == live
        imported = import_reference_folder(first.folder, session_id="s2")
        again = imported.events
        turns, _ = assign_turns(again)
        for ev, turn in zip(again, turns, strict=True):
            ev.turn = turn
        second = export_session(root / "out2", "a", again, progress=False)
        assert files(second.folder) == live
