"""Public import path of ``session_server.values.errors`` (DESIGN §3); the code lives there."""

from __future__ import annotations

from .values.errors import *  # noqa: F403
from .values.errors import __all__ as __all__
