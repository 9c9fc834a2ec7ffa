"""``import session_server.client`` loads the client alone (issue 11).

A program that only talks to a server must not load the database driver, the store, the
server, the runtime, the RPC handlers or the compaction planners; a fresh interpreter
shows what an import really loads.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
NOT_LOADED = (
    "sqlite3",
    "prometheus_client",
    "session_server.storage",
    "session_server.server",
    "session_server.runtime",
    "session_server.compaction",
    "session_server.rpc.methods",
    "session_server.rpc.table",
)


def loaded_by(statement: str) -> list[str]:
    code = f"import sys, json\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return list(json.loads(proc.stdout))


def heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == n or m.startswith(n + ".") for n in NOT_LOADED)]


def test_the_client_loads_no_store_server_or_compaction() -> None:
    modules = loaded_by("import session_server.client")
    assert "session_server.client" in modules
    assert heavy(modules) == []


def test_the_check_sees_what_the_server_loads() -> None:
    modules = heavy(loaded_by("import session_server.server, session_server.runtime.registry"))
    for name in ("sqlite3", "session_server.server", "session_server.rpc.table"):
        assert name in modules
