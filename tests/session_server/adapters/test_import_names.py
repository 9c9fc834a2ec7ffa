"""The adapters install as ``session_server.adapters`` (the wheel's contents:
``test_packaging.py``); the old top-level name is a deprecated alias of the same modules,
available only in a checkout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "always::DeprecationWarning", "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )


def test_the_old_name_warns_and_is_the_same_modules() -> None:
    out = run_python(
        "import session_server.adapters as new\n"
        "import adapters, adapters.workers_ai\n"
        "from adapters import anthropic\n"
        "print(adapters is new, adapters.workers_ai is new.workers_ai,"
        " anthropic.adapter is new.anthropic.adapter,"
        " adapters.get('workers-ai') is new.workers_ai.adapter)\n"
    )
    assert out.stdout.split() == ["True", "True", "True", "True"]
    assert "DeprecationWarning" in out.stderr
    assert "session_server.adapters" in out.stderr


def test_the_old_name_first_gives_the_same_modules() -> None:
    out = run_python(
        "import adapters.openai_chat as old\n"
        "import session_server.adapters.openai_chat as new\n"
        "print(old is new)\n"
    )
    assert out.stdout.split() == ["True"]
