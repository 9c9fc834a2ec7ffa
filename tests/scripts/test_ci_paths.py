"""Every source or test file a CI shell script names exists: a moved test must not turn a
CI step into one that runs nothing (pytest fails on a missing path, but only in CI)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATH = re.compile(r"\b(?:tests|session_server|scripts|examples)/[\w/.-]+\.py\b")


def shell_scripts() -> list[Path]:
    scripts = [p for p in (ROOT / "scripts").iterdir() if p.is_file() and p.suffix != ".py"]
    return [*scripts, *(ROOT / ".ci").iterdir()]


def test_the_scan_finds_the_websockets_tests() -> None:
    text = (ROOT / "scripts" / "ci_websockets_versions").read_text(encoding="utf-8")
    assert "tests/session_server/server/test_ws_compat.py" in PATH.findall(text)


def test_every_file_a_ci_script_names_exists() -> None:
    missing = [
        f"{script.relative_to(ROOT)}: {name}"
        for script in shell_scripts()
        for name in PATH.findall(script.read_text(encoding="utf-8", errors="replace"))
        if not (ROOT / name).exists()
    ]
    assert missing == []
