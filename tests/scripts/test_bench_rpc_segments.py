"""The segment arithmetic of ``scripts/bench_rpc_segments.py``."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from bench_rpc_segments import segments


def test_each_call_is_cut_at_its_four_points() -> None:
    entries: list[tuple[str, float]] = []
    t = 0.0
    for _ in range(20):
        entries += [
            ("in", t),
            ("in", t + 0.000_010),  # a second piece of the same frame: not a new call
            ("start", t + 0.000_100),
            ("end", t + 0.000_300),
            ("out", t + 0.000_350),
        ]
        t += 0.001
    medians = segments(entries)
    assert round(medians["frame -> writer"], 3) == 100.0
    assert round(medians["writer"], 3) == 200.0
    assert round(medians["writer -> answer"], 3) == 50.0
    assert round(medians["answer -> next frame"], 3) == 650.0


def test_writes_outside_a_call_do_not_count() -> None:
    entries = [
        ("start", 0.0),  # a write no frame asked for (a session created before the run)
        ("end", 0.001),
        ("in", 0.002),
        ("start", 0.002_1),
        ("end", 0.002_2),
        ("out", 0.002_25),
    ]
    medians = segments(entries)
    assert round(medians["frame -> writer"], 3) == 100.0
    assert round(medians["writer"], 3) == 100.0
    assert "answer -> next frame" not in medians
