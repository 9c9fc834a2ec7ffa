#!/usr/bin/env python3
"""What the restore check costs (issue 33, item 6): ``check_agent_file`` on an agent file
of one session with N events, against SQLite's ``quick_check`` alone (the check a restore
made before) on a copy of the same file, in the same run.

    .venv/bin/python scripts/bench_restore_check.py [--events 200000] [--rounds 3]

The check runs on a worker thread while the agent keeps serving; only the rename that
puts the checked file in place closes the agent. Prints the file size, the best time of
each over the rounds and their ratio.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

from session_server.storage.file_check import check_agent_file
from session_server.storage.sqlite_open import connect, migrate


def make_file(path: Path, events: int) -> None:
    conn = connect(path, synchronous="NORMAL", busy_timeout_ms=5000, readonly=False)
    migrate(conn)
    conn.execute("BEGIN")
    conn.execute(
        "INSERT INTO sessions (id, agent_id, created_at, updated_at, last_seq)"
        " VALUES ('s', 'a', 1, 1, ?)",
        (events,),
    )
    conn.executemany(
        "INSERT INTO events (id, session_id, seq, action, content, metadata, created_at)"
        " VALUES (?, 's', ?, 'user_message', ?, '{\"k\":1}', 1)",
        ((f"e{i}", i, os.urandom(50).hex()) for i in range(1, events + 1)),
    )
    conn.execute("COMMIT")
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.close()


def timed_quick_check(path: Path) -> float:
    started = time.perf_counter()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA quick_check").fetchone()[0] == "ok"
    finally:
        conn.close()
    return time.perf_counter() - started


def timed_check(path: Path) -> float:
    started = time.perf_counter()
    check_agent_file(path)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-restore-check-"))
    try:
        source = tmp / "agent.sqlite"
        make_file(source, args.events)
        quick, full = [], []
        for _ in range(args.rounds):
            copy = tmp / "copy.sqlite"
            shutil.copyfile(source, copy)
            quick.append(timed_quick_check(copy))
            shutil.copyfile(source, copy)
            full.append(timed_check(copy))
        size = source.stat().st_size / 2**20
        print(f"file: {args.events} events, {size:.1f} MiB")
        print(f"quick_check (before): {min(quick):.2f} s")
        print(f"check_agent_file (now): {min(full):.2f} s ({min(full) / min(quick):.1f}x)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
