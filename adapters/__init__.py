"""Provider format adapters and their registry: ``adapters.get(name)``."""

from __future__ import annotations

from session_server.errors import InvalidParamsError

from . import workers_ai
from .base import ModelFormatAdapter

__all__ = ["ModelFormatAdapter", "get", "names"]

_REGISTRY: dict[str, ModelFormatAdapter] = {
    workers_ai.adapter.name: workers_ai.adapter,
}


def names() -> list[str]:
    """Names of every registered adapter, sorted."""
    return sorted(_REGISTRY)


def get(name: str) -> ModelFormatAdapter:
    """The adapter registered under ``name``; unknown names raise ``InvalidParamsError``."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise InvalidParamsError(
            f"adapter: unknown adapter {name!r}; known adapters: {', '.join(names())}",
            data={"field": "adapter"},
        ) from None
