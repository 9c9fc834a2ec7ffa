"""Public import path of ``session_server.core.errors`` (DESIGN §3); the code lives there."""

from __future__ import annotations

from .core.errors import *  # noqa: F403
from .core.errors import __all__ as __all__
