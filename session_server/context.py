"""Public import path of ``session_server.values.context`` (DESIGN §3); the code lives there."""

from __future__ import annotations

from .values.context import *  # noqa: F403
from .values.context import __all__ as __all__
