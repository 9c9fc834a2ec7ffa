"""The core is pure: it never imports asyncio, aiosqlite or websockets (DESIGN §2)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ("asyncio", "aiosqlite", "websockets")
# Folders (and single modules) that hold pure code: values in, values out, no I/O.
PURE_FOLDERS = ("values", "core", "compaction", "mirror", "adapters")
PURE_EXTRA = (
    ROOT / "session_server" / "rpc" / "protocol.py",
    ROOT / "session_server" / "auth" / "tokens.py",
)
# What a pure module may not import, on top of the event loop: a database, the network,
# the shell's folders.
FORBIDDEN_IN_PURE = (*FORBIDDEN, "sqlite3", "openai", "httpx", "prometheus_client")
SHELL_FOLDERS = (
    "runtime",
    "storage",
    "mirror_io",
    "server",
    "concurrency",
    "process",
    "cli",
    "client",
    "integrations",
)
CORE_FILES = sorted(
    [p for folder in PURE_FOLDERS for p in (ROOT / "session_server" / folder).glob("*.py")]
    + list(PURE_EXTRA),
)
CORE_MODULES = sorted(
    ".".join(p.relative_to(ROOT / "session_server").with_suffix("").parts).removesuffix(".__init__")
    for p in CORE_FILES
    if p.is_relative_to(ROOT / "session_server")
)


def imported_modules(path: Path) -> set[str]:
    """Every absolute module name an ``import`` statement anywhere in ``path`` names
    (function bodies and ``if TYPE_CHECKING`` blocks included)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Call):
            # importlib.import_module("asyncio") / __import__("asyncio")
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("import_module", "__import__") and node.args:
                arg = node.args[0]
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    names.add(arg.value)
    return names


def test_every_core_file_exists() -> None:
    for path in CORE_FILES:
        assert path.is_file(), path
    assert (ROOT / "session_server" / "adapters" / "workers_ai.py") in CORE_FILES
    assert (ROOT / "session_server" / "values" / "codec.py") in CORE_FILES
    assert (ROOT / "session_server" / "values" / "tokens.py") in CORE_FILES
    assert (ROOT / "session_server" / "core" / "agent_core.py") in CORE_FILES
    assert len(CORE_FILES) >= 30


def relative_targets(path: Path) -> set[str]:
    """Package-relative modules that ``path`` imports (``from ..runtime import x`` ->
    ``runtime``), resolved against the file's own package."""
    package = path.relative_to(ROOT / "session_server").parent.parts
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            base = list(package[: len(package) - (node.level - 1)])
            targets.add(".".join([*base, *(node.module.split(".") if node.module else [])]))
        elif (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.level == 0
            and node.module.startswith("session_server.")
        ):
            targets.add(node.module.removeprefix("session_server."))
    return targets


@pytest.mark.parametrize(
    "path",
    [p for p in CORE_FILES if p.is_relative_to(ROOT / "session_server")],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_pure_module_imports_nothing_from_the_shell(path: Path) -> None:
    bad = sorted(
        name
        for name in imported_modules(path)
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN_IN_PURE)
    )
    shell = sorted(t for t in relative_targets(path) if t.split(".")[0] in SHELL_FOLDERS)
    assert bad == [] and shell == [], f"{path.relative_to(ROOT)} imports {bad + shell}"


@pytest.mark.parametrize("path", CORE_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_core_file_imports_no_io_library(path: Path) -> None:
    bad = sorted(
        name
        for name in imported_modules(path)
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)
    )
    assert bad == [], f"{path.relative_to(ROOT)} imports {bad}"


def test_the_checker_sees_nested_imports(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import aiosqlite\n"
        "def f():\n    from asyncio import sleep\n    import websockets.client\n"
        "import importlib\nimportlib.import_module('asyncio.tasks')\n"
    )
    assert {"aiosqlite", "asyncio", "websockets.client", "asyncio.tasks"} <= imported_modules(
        sample
    )


def loaded_after_import(modules: str) -> list[str]:
    code = (
        f"import sys, json\nimport {modules}\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        f"{FORBIDDEN!r})))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return list(json.loads(proc.stdout))


@pytest.mark.parametrize(
    "modules",
    [
        # The set the issue names.
        "session_server.values.codec, session_server.values.context, session_server.values.turns, "
        "session_server.adapters",
        # Every core module, the package root and every adapter (tiktoken and msgspec
        # included: neither pulls asyncio in today, so all three names are checked).
        ", ".join(["session_server"] + [f"session_server.{m}" for m in CORE_MODULES]),
    ],
    ids=["issue-set", "all-core"],
)
def test_importing_the_core_loads_no_io_library(modules: str) -> None:
    assert loaded_after_import(modules) == []
