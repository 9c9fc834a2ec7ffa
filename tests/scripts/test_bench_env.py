"""The benchmarks' token set-up (``tests/support/bench_env.py``): with ``TIKTOKEN_CACHE_DIR``
unset, a benchmark process points it at the shared cache and counts with tiktoken; a server
subprocess's mode is read from its stderr."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.bench_env import server_token_mode
from tests.support.paths import SHARED
from tests.support.server import ROOT

_PROBE = """
import os
from tests.support.bench_env import token_mode, use_shared_tiktoken
before = os.environ.get("TIKTOKEN_CACHE_DIR")
use_shared_tiktoken()
print(before, os.environ.get("TIKTOKEN_CACHE_DIR"), token_mode())
"""


def test_unset_cache_dir_points_at_the_shared_cache_and_counts_with_tiktoken() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TIKTOKEN_CACHE_DIR"}
    out = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env={**env, "PYTHONPATH": str(ROOT)},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    before, after, mode = out.stdout.split()
    assert before == "None"
    assert after == str((SHARED / "tiktoken").resolve())
    assert mode == "tiktoken", out.stderr


def test_server_token_mode_reads_the_degradation_warning() -> None:
    warning = (
        "tiktoken encoding o200k_base unavailable (ConnectionError); token counts are estimates"
    )
    assert server_token_mode(f"starting\n{warning}\n") == "estimate"
    assert server_token_mode("session-server listening on ws://127.0.0.1:1 \n") == "tiktoken"
