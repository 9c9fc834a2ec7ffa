"""Public import path of ``session_server.core.codec`` (DESIGN §3); the code lives there."""

from __future__ import annotations

from .core.codec import *  # noqa: F403
from .core.codec import __all__ as __all__
