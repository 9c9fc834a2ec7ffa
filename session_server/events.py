"""Public import path of ``session_server.values.events`` (DESIGN §3); the code lives there."""

from __future__ import annotations

from .values.events import *  # noqa: F403
from .values.events import __all__ as __all__
