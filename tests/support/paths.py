"""Where the shared test data lives (``shared/`` beside the checkout, or above a worktree).

``SHARED`` is ``$SESSION_SERVER_SHARED_DIR`` when set, else the first ``shared`` folder
with ``fixtures`` in it found going up from the checkout (``/work/main`` and worktrees
under ``/work/wt/<name>`` both find ``/work/shared``).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["FIXTURES", "SHARED"]

_ROOT = Path(__file__).resolve().parents[2]


def _shared() -> Path:
    env = os.environ.get("SESSION_SERVER_SHARED_DIR")
    if env:
        return Path(env)
    for parent in _ROOT.parents:
        if (parent / "shared" / "fixtures").is_dir():
            return parent / "shared"
    return _ROOT.parent / "shared"


SHARED = _shared()
FIXTURES = SHARED / "fixtures" / "reference-memory"
