"""``scripts/_env.sh``, the set-up ``scripts/serve`` and ``scripts/test`` share: run with
real bash in a scratch copy whose ``.venv/bin/python`` records the installs it is asked
for, in the orders a fresh clone may see (serve then test, test then serve, an edited
pyproject.toml)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from tests.support.server import ROOT

FAKE_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$(dirname "$0")/../calls.log"
"""


def scratch(tmp_path: Path) -> Path:
    root = tmp_path / "clone"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "_env.sh", root / "scripts" / "_env.sh")
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    old = time.time() - 3600
    os.utime(root / "pyproject.toml", (old, old))
    python = root / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    return root


def source_env(root: Path, extras: str | None) -> list[str]:
    """Source ``_env.sh`` as scripts/serve (no extras) or scripts/test (dev) do; the
    installs it asked for."""
    log = root / ".venv" / "calls.log"
    log.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "SS_EXTRAS"}
    if extras:
        env["SS_EXTRAS"] = extras
    proc = subprocess.run(
        ["bash", "-c", "source scripts/_env.sh"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    calls = log.read_text().splitlines() if log.exists() else []
    return [c for c in calls if "install" in c and "--upgrade pip" not in c]


def test_serve_then_test_then_serve(tmp_path: Path) -> None:
    root = scratch(tmp_path)
    assert source_env(root, None) == ["-m pip install -q -e ."]
    assert source_env(root, "dev") == ["-m pip install -q -e .[dev]"]
    assert source_env(root, None) == [], "the dev install holds everything serve needs"
    assert source_env(root, "dev") == []


def test_test_then_serve_installs_once(tmp_path: Path) -> None:
    root = scratch(tmp_path)
    assert source_env(root, "dev") == ["-m pip install -q -e .[dev]"]
    assert source_env(root, None) == []


def test_an_edited_pyproject_reinstalls_what_each_script_needs(tmp_path: Path) -> None:
    root = scratch(tmp_path)
    source_env(root, "dev")
    later = time.time() + 60
    os.utime(root / "pyproject.toml", (later, later))
    assert source_env(root, None) == ["-m pip install -q -e ."]
    assert source_env(root, "dev") == ["-m pip install -q -e .[dev]"]
