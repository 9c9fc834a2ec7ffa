"""Provider format adapters and their registry: ``session_server.adapters.get(name)``.

Registered: ``workers-ai``, ``openai-chat``, ``openai-responses`` and ``anthropic``.
:func:`render_context` renders system instructions and context messages with the adapter
of a given name (the pure core of the ``context.render`` RPC).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

from session_server.values.errors import InvalidParamsError
from session_server.values.events import ContextMessage
from session_server.values.validation import parse_message

if __name__ == "adapters":
    # The repository's top-level ``adapters`` folder (a link to this package) imported by
    # its old name: warn, and make ``adapters`` and ``adapters.<name>`` the very modules of
    # ``session_server.adapters`` (one registry, one class per adapter), not copies.
    import importlib
    import warnings

    warnings.warn(
        "the top-level package name 'adapters' is deprecated (it clashes with an unrelated "
        "PyPI package and is not installed by the wheel); import session_server.adapters",
        DeprecationWarning,
        stacklevel=2,
    )
    _real = importlib.import_module("session_server.adapters")
    for _name, _module in list(sys.modules.items()):
        if _name.startswith("session_server.adapters."):
            sys.modules["adapters" + _name.removeprefix("session_server.adapters")] = _module
    sys.modules["adapters"] = _real

from . import anthropic, openai_chat, openai_responses, workers_ai
from .base import ModelFormatAdapter

__all__ = ["ModelFormatAdapter", "get", "names", "render_context"]

_REGISTRY: dict[str, ModelFormatAdapter] = {
    a.name: a
    for a in (workers_ai.adapter, openai_chat.adapter, openai_responses.adapter, anthropic.adapter)
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


def render_context(
    adapter_name: str,
    system_instructions: Sequence[str] | None,
    messages: Sequence[ContextMessage | Mapping[str, Any]],
) -> dict[str, Any]:
    """Render a working context in the format of the adapter named ``adapter_name``.

    ``system_instructions`` is a list of strings (``None`` for none); ``messages`` are
    ``ContextMessage``s or JSON objects of that shape (validated with
    ``session_server.values.validation.parse_message``, errors naming ``messages[i]``). Pure: the
    result is plain JSON-compatible data. Raises ``InvalidParamsError`` for an unknown
    adapter or invalid input, and its subclass ``RenderError`` for a context the format
    cannot express.
    """
    adapter = get(adapter_name)
    if isinstance(system_instructions, str) or not isinstance(system_instructions, Sequence | None):
        raise InvalidParamsError(
            "system_instructions: must be a list of strings",
            data={"field": "system_instructions"},
        )
    instructions = list(system_instructions or ())
    for i, text in enumerate(instructions):
        if not isinstance(text, str):
            field = f"system_instructions[{i}]"
            raise InvalidParamsError(
                f"{field}: must be a string, got {type(text).__name__}", data={"field": field}
            )
    parsed = [
        msg
        if isinstance(msg, ContextMessage)
        else parse_message(dict(msg) if isinstance(msg, Mapping) else msg, f"messages[{i}]")
        for i, msg in enumerate(messages)
    ]
    return adapter.to_model_messages(instructions, parsed)
