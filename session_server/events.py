"""Public import path of ``session_server.core.events`` (DESIGN §3); the code lives there."""

from __future__ import annotations

from .core.events import *  # noqa: F403
from .core.events import __all__ as __all__
