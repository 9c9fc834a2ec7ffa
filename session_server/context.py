"""Public import path of ``session_server.core.context`` (DESIGN §3); the code lives there."""

from __future__ import annotations

from .core.context import *  # noqa: F403
from .core.context import __all__ as __all__
