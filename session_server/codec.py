"""Public import path of ``session_server.values.codec`` (DESIGN §3); the code lives there."""

from __future__ import annotations

from .values.codec import *  # noqa: F403
from .values.codec import __all__ as __all__
