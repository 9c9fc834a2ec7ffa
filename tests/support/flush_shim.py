"""The flush-latency emulation of the benchmarks (``scripts/flush_delay.c``).

On this project's VM a flush is nearly free (a raw FULL commit of a turn costs about
0.22 ms), so group commit saves little here; on common disks a flush costs 1-10 ms. The
shim, preloaded into a process (``LD_PRELOAD``), makes ``fsync``/``fdatasync`` call the
real function and then sleep ``FLUSH_DELAY_US`` microseconds: every system in that
process (raw sqlite3, the store, ``SQLiteSession``) pays the same for each flush, and no
library is patched.

- ``build_shim(out_dir)``: compile the shim with gcc into ``out_dir``; raises
  ``ShimUnavailable`` (with the reason) when gcc is missing or fails.
- ``shim_env(shim, delay_us)``: this process's environment with the shim preloaded and
  the delay set, for a subprocess.
- ``raw_full_commit_times(path, commits)``: seconds of each of ``commits`` raw sqlite3
  commits at ``synchronous=FULL`` in WAL mode (one flush each), to check in the process
  under the shim that it is active: each commit takes at least the delay.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

__all__ = [
    "DELAY_ENV",
    "SOURCE",
    "ShimUnavailable",
    "build_shim",
    "raw_full_commit_times",
    "shim_env",
]

SOURCE = Path(__file__).resolve().parents[2] / "scripts" / "flush_delay.c"
DELAY_ENV = "FLUSH_DELAY_US"


class ShimUnavailable(RuntimeError):
    """The shim could not be built (the message says why)."""


def build_shim(out_dir: Path) -> Path:
    gcc = shutil.which("gcc")
    if gcc is None:
        raise ShimUnavailable("gcc is not on the PATH (Debian: apt-get install gcc)")
    out = out_dir / "flush_delay.so"
    done = subprocess.run(
        [gcc, "-shared", "-fPIC", "-O2", "-o", str(out), str(SOURCE), "-ldl"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if done.returncode != 0:
        raise ShimUnavailable(f"gcc failed: {done.stderr.strip()}")
    return out


def shim_env(shim: Path, delay_us: int) -> dict[str, str]:
    preload = os.environ.get("LD_PRELOAD", "")
    return {
        **os.environ,
        "LD_PRELOAD": f"{shim}:{preload}" if preload else str(shim),
        DELAY_ENV: str(delay_us),
    }


def raw_full_commit_times(path: Path, commits: int) -> list[float]:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE IF NOT EXISTS flush_check (n INTEGER PRIMARY KEY, text TEXT)")
        times = []
        for n in range(commits):
            t0 = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO flush_check (text) VALUES (?)", (f"row {n}",))
            conn.execute("COMMIT")
            times.append(time.perf_counter() - t0)
        return times
    finally:
        conn.close()
