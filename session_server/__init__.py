"""session-server: durable per-agent session memory for LLM agents.

Core names (pure) live in ``session_server.values.events``, ``.codec``, ``.context``, ``.turns``
and ``.tokens``. ``ActorRegistry`` and ``AgentActor`` (the I/O shell) are loaded lazily so
that importing the core never imports ``asyncio`` or the SQLite store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .values.errors import SessionServerError

if TYPE_CHECKING:
    from .runtime.actor import AgentActor
    from .runtime.registry import ActorRegistry
    from .values.plans import AppendResult

__all__ = ["ActorRegistry", "AgentActor", "AppendResult", "SessionServerError", "__version__"]

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "ActorRegistry":
        from .runtime.registry import ActorRegistry

        return ActorRegistry
    if name == "AgentActor":
        from .runtime.actor import AgentActor

        return AgentActor
    if name == "AppendResult":
        from .values.plans import AppendResult

        return AppendResult
    raise AttributeError(f"module 'session_server' has no attribute {name!r}")
