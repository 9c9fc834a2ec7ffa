"""The ``ModelFormatAdapter`` protocol and helpers shared by the adapters (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from session_server.values.events import ContextMessage

__all__ = ["ModelFormatAdapter"]


@runtime_checkable
class ModelFormatAdapter(Protocol):
    """Renders system instructions and context messages into one provider's request shape.

    Adapters are stateless and pure: the same input always gives the same output, and the
    result is plain JSON-compatible data (keys that do not apply are absent, never null).
    An input the format cannot express raises ``session_server.values.errors.RenderError``
    naming the message index.
    """

    @property
    def name(self) -> str: ...

    def to_model_messages(
        self, system_instructions: Sequence[str], messages: Sequence[ContextMessage]
    ) -> dict[str, Any]: ...
