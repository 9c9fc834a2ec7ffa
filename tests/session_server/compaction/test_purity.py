"""The compaction package is core: importing it pulls in no event loop, SDK or database."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import session_server.compaction as compaction

PACKAGE = Path(compaction.__file__).parent
FORBIDDEN = {"asyncio", "aiosqlite", "websockets"}


def test_importing_the_package_loads_no_io_modules() -> None:
    code = (
        "import sys, session_server.compaction\n"
        "bad = sorted(m for m in ('asyncio', 'aiosqlite', 'websockets', 'openai', 'httpx') "
        "if m in sys.modules)\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == ""


def test_no_module_imports_an_event_loop_or_database() -> None:
    for path in sorted(PACKAGE.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"
                if name.split(".")[0] == "openai":
                    assert path.name == "summarizers.py", f"{path.name} imports openai"
