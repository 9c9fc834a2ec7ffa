"""``storage.staging``: folders in the memory dir, swept at start-up unless in use."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from session_server.storage.staging import STAGING_DIR, staging, sweep_staging
from tests.support.server import ROOT

HOLD = """
import sys
from pathlib import Path
from session_server.storage.staging import staging
with staging(Path(sys.argv[1]), "restore") as folder:
    (folder / "agent.sqlite").write_bytes(b"x")
    print(folder, flush=True)
    sys.stdin.readline()
"""


def test_a_folder_is_made_locked_and_removed(tmp_path: Path) -> None:
    with staging(tmp_path, "import") as folder:
        assert folder.parent == tmp_path / STAGING_DIR
        assert folder.name.startswith("import-")
        (folder / "data").write_text("copy")
        # In use: a sweep (as at a server's start) keeps it.
        assert sweep_staging(tmp_path) == 0
        assert (folder / "data").exists()
    assert not (tmp_path / STAGING_DIR).exists()  # the last one out removes it


def test_the_sweep_removes_what_a_dead_process_left_and_keeps_a_live_ones(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    live = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    dead = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert live.stdout is not None and dead.stdout is not None
    live_folder = Path(live.stdout.readline().strip())
    dead_folder = Path(dead.stdout.readline().strip())
    dead.kill()  # SIGKILL: its folder stays behind
    dead.wait()
    stray = tmp_path / STAGING_DIR / "stray-file"
    stray.write_bytes(b"?")
    assert dead_folder.exists()
    assert sweep_staging(tmp_path) == 2
    assert not dead_folder.exists() and not stray.exists()
    assert (live_folder / "agent.sqlite").exists()
    live.communicate("\n")
    assert live.returncode == 0
    assert not live_folder.exists()
    assert sweep_staging(tmp_path / "nothing-here") == 0
