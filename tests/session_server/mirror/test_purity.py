"""The mirror never imports asyncio, aiosqlite or websockets (its file I/O is synchronous)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

MIRROR = Path(__file__).resolve().parents[3] / "session_server" / "mirror"
FORBIDDEN = ("asyncio", "aiosqlite", "websockets")


@pytest.mark.parametrize("path", sorted(MIRROR.glob("*.py")), ids=lambda p: p.name)
def test_mirror_module_imports_no_io_library(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    assert not {n for n in names if n.split(".")[0] in FORBIDDEN}
    assert len(list(MIRROR.glob("*.py"))) >= 6
