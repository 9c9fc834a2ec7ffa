"""``scripts/house_moves.py`` on a small real git repository: the moves, the rewritten
imports and paths, the loud failure on an unplanned top-level module, the idempotent
re-run."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.server import ROOT

FILES = {
    "session_server/__init__.py": "from .core.errors import Oops\n",
    "session_server/events.py": "from .core.events import *  # noqa: F403\n",
    "session_server/core/__init__.py": "",
    "session_server/values/errors.py": "class Oops(Exception):\n    pass\n",
    "session_server/values/events.py": "from .errors import Oops\n",
    "session_server/core/agent_core.py": (
        "from . import errors as errs\nfrom .errors import Oops\nfrom .events import Oops as O\n"
    ),
    "session_server/budget.py": "import asyncio\n",
    "session_server/server/server.py": (
        '"""Uses ``values.errors.Oops``."""\n'
        "from .budget import asyncio\n"
        "from .core.errors import Oops\n"
        'log = "session_server.server"\n'
        "class SessionServer:\n    pass\n"
    ),
    "tests/__init__.py": "",
    "tests/session_server/__init__.py": "",
    "tests/session_server/server/test_server_bounds.py": (
        "from pathlib import Path\n"
        "from session_server.server import log\n"
        "from session_server.server import SessionServer\n"
        "from session_server.core import errors\n"
        "ROOT = Path(__file__).resolve().parents[2]\n"
    ),
    "docs/architecture.md": "| `core/errors.py` | errors |\n| `server.py` | the server |\n",
}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=repo, check=True, capture_output=True, text=True
    ).stdout


def make_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    for name, text in FILES.items():
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (repo / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "house_moves.py", repo / "scripts" / "house_moves.py")
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "start")
    return repo


def run(repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "scripts/house_moves.py"],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_moves_and_rewrites(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    proc = run(repo)
    assert proc.returncode == 0, proc.stderr
    assert "skipped (not in the tree): session_server.auth" in proc.stdout
    pkg = repo / "session_server"
    assert not (pkg / "server.py").exists() and not (pkg / "budget.py").exists()
    server = (pkg / "server" / "server.py").read_text()
    assert "from ..concurrency.budget import asyncio" in server
    assert "from ..values.errors import Oops" in server
    assert "``values.errors.Oops``" in server
    assert 'log = "session_server.server"' in server  # the package keeps the name
    assert "from .server import SessionServer" in (pkg / "server" / "__init__.py").read_text()
    core = (pkg / "core" / "agent_core.py").read_text()
    assert "from ..values import errors as errs" in core
    assert "from ..values.errors import Oops" in core
    assert "from ..values.events import Oops as O" in core
    assert (pkg / "values" / "events.py").read_text() == "from .errors import Oops\n"
    assert (pkg / "__init__.py").read_text() == "from .values.errors import Oops\n"
    assert (pkg / "events.py").read_text().startswith("from .values.events import *")
    test = (repo / "tests/session_server/server/test_server_bounds.py").read_text()
    assert "from session_server.server.server.server import log" in test
    assert "from session_server.server import SessionServer" in test  # kept public path
    assert "from session_server.values import errors" in test
    assert "parents[3]" in test
    assert (repo / "tests/session_server/server/__init__.py").exists()
    docs = (repo / "docs/architecture.md").read_text()
    assert "`values/errors.py`" in docs and "`server/server.py`" in docs

    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "moved")
    again = run(repo)
    assert again.returncode == 0, again.stderr
    assert git(repo, "status", "--porcelain") == ""


def test_an_unplanned_top_level_module_fails_before_any_change(tmp_path: Path) -> None:
    repo = make_repo(tmp_path)
    (repo / "session_server" / "newcomer.py").write_text("")
    proc = run(repo)
    assert proc.returncode == 1
    assert "newcomer" in proc.stderr
    assert (repo / "session_server" / "server.py").exists()
    assert git(repo, "status", "--porcelain") == "?? session_server/newcomer.py\n"
