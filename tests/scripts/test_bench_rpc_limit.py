"""The summary of ``scripts/bench_rpc_limit.py``: fractions of each round's own bound, and
how many rounds reached the target."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from bench_rpc import Apart
from bench_rpc_limit import Round, summary


def test_each_round_is_a_fraction_of_its_own_bound() -> None:
    # bound = 1 / (1/300 + 1/600) = 200 calls/s in each round.
    rounds = [
        Round(300.0, 600.0, Apart(120.0), Apart(90.0)),  # 0.60 and 0.45
        Round(300.0, 600.0, Apart(90.0), Apart(90.0)),  # 0.45 and 0.45
        Round(300.0, 600.0, Apart(100.0), Apart(110.0)),  # 0.50 and 0.55
    ]
    assert [round(r.bound) for r in rounds] == [200] * 3
    assert summary(rounds)[2:] == [
        "| (m-xkm) the whole contract at the least | 0.45 / 0.50 / 0.60 | 2 of 3 |",
        "| (b-xr) session-server | 0.45 / 0.45 / 0.55 | 1 of 3 |",
        "| (b-xr) / (m-xkm) | 0.75 / 1.00 / 1.10 | |",
    ]
