"""The benchmarks' flush-latency shim (``scripts/flush_delay.c``), built with gcc (which
``scripts/test`` installs when missing): under it a raw FULL commit and an ``os.fsync``
take at least the delay, the data is intact, and without a delay nothing is slowed."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.support.flush_shim import build_shim, shim_env

DELAY_US = 20_000  # far above a flush of this VM (0.1-0.3 ms), so the check is not close

_CHILD = """
import json, os, sys, time
from pathlib import Path
from tests.support.flush_shim import raw_full_commit_times
db = Path(sys.argv[1])
commits = raw_full_commit_times(db, 5)
fd = os.open(db.with_suffix(".bin"), os.O_WRONLY | os.O_CREAT, 0o600)
os.write(fd, b"x" * 4096)
t0 = time.perf_counter()
os.fsync(fd)
fsync = time.perf_counter() - t0
t0 = time.perf_counter()
os.fdatasync(fd)
fdatasync = time.perf_counter() - t0
os.close(fd)
print(json.dumps({"commits": commits, "fsync": fsync, "fdatasync": fdatasync}))
"""


def _run(shim: Path, delay_us: int, db: Path) -> dict[str, list[float] | float]:
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(db)],
        env={**shim_env(shim, delay_us), "PYTHONPATH": str(root)},
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, list[float] | float] = json.loads(done.stdout)
    return result


def test_each_flush_takes_at_least_the_delay_and_keeps_the_data(tmp_path: Path) -> None:
    shim = build_shim(tmp_path)
    delayed = _run(shim, DELAY_US, tmp_path / "delayed.sqlite")
    commits = delayed["commits"]
    assert isinstance(commits, list) and len(commits) == 5
    assert min(commits) >= DELAY_US / 1e6, commits
    assert delayed["fsync"] >= DELAY_US / 1e6
    assert delayed["fdatasync"] >= DELAY_US / 1e6
    with sqlite3.connect(tmp_path / "delayed.sqlite") as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        rows = conn.execute("SELECT n, text FROM flush_check ORDER BY n").fetchall()
    assert rows == [(n + 1, f"row {n}") for n in range(5)]
    assert (tmp_path / "delayed.bin").read_bytes() == b"x" * 4096


def test_no_delay_leaves_flushes_alone(tmp_path: Path) -> None:
    shim = build_shim(tmp_path)
    plain = _run(shim, 0, tmp_path / "plain.sqlite")
    commits = plain["commits"]
    assert isinstance(commits, list)
    # Not one commit in five sleeps the 20 ms the delayed run does for each.
    assert sorted(commits)[2] < DELAY_US / 1e6, commits
