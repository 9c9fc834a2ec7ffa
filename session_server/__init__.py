"""session-server: durable per-agent session memory for LLM agents.

Core names (pure) live in ``session_server.events``, ``.codec``, ``.context``, ``.turns``
and ``.tokens``. ``ActorRegistry`` and ``AgentActor`` (the I/O shell) are loaded lazily so
that importing the core never imports ``asyncio`` or the SQLite store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import SessionServerError

if TYPE_CHECKING:
    from .actor import AgentActor
    from .registry import ActorRegistry
    from .store import AppendResult

__all__ = ["ActorRegistry", "AgentActor", "AppendResult", "SessionServerError", "__version__"]

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "ActorRegistry":
        from .registry import ActorRegistry

        return ActorRegistry
    if name == "AgentActor":
        from .actor import AgentActor

        return AgentActor
    if name == "AppendResult":
        from .store import AppendResult

        return AppendResult
    raise AttributeError(f"module 'session_server' has no attribute {name!r}")
