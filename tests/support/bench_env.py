"""The token-counting set-up every benchmark script shares.

- ``use_shared_tiktoken()``: point ``TIKTOKEN_CACHE_DIR`` at the shared encoding cache
  (``SHARED/tiktoken``: ``../shared/tiktoken`` from a checkout, as ``tests/conftest.py`` and
  ``scripts/_env.sh`` do) when it is unset and that folder exists. The variable is in
  ``os.environ``, so server subprocesses started afterwards count with tiktoken too.
- ``token_mode()``: ``"tiktoken"`` when this process's counter loaded its encoding,
  ``"estimate"`` when it degraded to the byte estimate (``values.tokens``); every benchmark
  prints it in its report header, since the estimate is cheaper than a real count.
- ``server_token_mode(stderr)``: the same for a server subprocess, from its stderr (the
  counter logs ``token counts are estimates`` once when it degrades).
"""

from __future__ import annotations

import os

from session_server.values.tokens import get_counter
from tests.support.paths import SHARED

__all__ = ["server_token_mode", "token_mode", "use_shared_tiktoken"]

_DEGRADED = "token counts are estimates"


def use_shared_tiktoken() -> None:
    if os.environ.get("TIKTOKEN_CACHE_DIR"):
        return
    cache = SHARED / "tiktoken"
    if cache.is_dir():
        os.environ["TIKTOKEN_CACHE_DIR"] = str(cache.resolve())


def token_mode() -> str:
    return "estimate" if get_counter().estimated else "tiktoken"


def server_token_mode(stderr: str) -> str:
    return "estimate" if _DEGRADED in stderr else "tiktoken"
