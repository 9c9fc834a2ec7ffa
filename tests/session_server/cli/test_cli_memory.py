"""`session-server import`, `inspect` and `export` as a user runs them (subprocesses)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.paths import FIXTURES

AGENT_DIR = FIXTURES / "agents" / "db manager_db manager_1393"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "session_server", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ.copy(),
    )


def test_import_inspect_export(tmp_path: Path) -> None:
    mem = str(tmp_path / "mem")
    done = cli(
        "import", str(AGENT_DIR), "--agent", "db manager", "--session", "s1", "--memory-dir", mem
    )
    assert done.returncode == 0, done.stderr
    assert "into session s1" in done.stdout
    shown = cli("inspect", "db manager", "--session", "s1", "--memory-dir", mem)
    assert shown.returncode == 0, shown.stderr
    assert "agent: db manager" in shown.stdout
    as_json = cli("inspect", "db manager", "--json", "--limit", "2", "--memory-dir", mem)
    view = json.loads(as_json.stdout)
    assert view["session_id"] == "s1" and len(view["raw_traces"]) == 2
    out = tmp_path / "out"
    exported = cli(
        "export", "db manager", "--session", "s1", "--out", str(out), "--memory-dir", mem
    )
    assert exported.returncode == 0, exported.stderr
    assert (out / "agents" / "db manager" / "raw_traces.jsonl").read_bytes() == (
        AGENT_DIR / "raw_traces.jsonl"
    ).read_bytes()


def test_errors_are_reported_not_raised(tmp_path: Path) -> None:
    mem = str(tmp_path / "mem")
    missing = cli(
        "export", "nobody", "--session", "nope", "--out", str(tmp_path), "--memory-dir", mem
    )
    assert missing.returncode == 1 and "not found" in missing.stderr
    bad = cli("import", str(tmp_path), "--agent", "../evil", "--memory-dir", mem)
    assert bad.returncode == 1 and "agent_id" in bad.stderr
    assert not (tmp_path / "evil").exists()


def test_inspect_into_a_closed_pipe_exits_quietly(tmp_path: Path) -> None:
    """``session-server inspect ... | head`` where the reader has gone: no traceback, the
    exit status of a process ended by SIGPIPE."""
    mem = str(tmp_path / "mem")
    done = cli(
        "import", str(AGENT_DIR), "--agent", "db manager", "--session", "s1", "--memory-dir", mem
    )
    assert done.returncode == 0, done.stderr
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte is written
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "session_server", "inspect", "db manager", "--memory-dir", mem],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            env=os.environ.copy(),
        )
    finally:
        os.close(write_end)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 128 + signal.SIGPIPE
