"""Tool definitions in each provider's own format (pure): what ``memory.tools`` answers.

A tool is a ``ToolSpec`` (name, description, JSON schema of its arguments); each adapter
wraps it the way its provider's API takes tools:

- ``openai-chat`` and ``workers-ai``: ``{"type": "function", "function": {name,
  description, parameters}}`` (Workers AI takes the OpenAI-compatible form on its
  function-calling models and its ``/v1/chat/completions`` endpoint);
- ``openai-responses``: ``{"type": "function", name, description, parameters}``;
- ``anthropic``: ``{name, description, input_schema}``.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from typing import Any

import msgspec

from ..values.errors import InvalidParamsError

__all__ = ["ToolSpec", "tool_definitions"]


class ToolSpec(msgspec.Struct, frozen=True):
    """One tool a model may call: its name, what it does, its arguments' JSON schema."""

    name: str
    description: str
    parameters: dict[str, Any]


def _one(adapter: str, spec: ToolSpec) -> dict[str, Any]:
    params = copy.deepcopy(spec.parameters)
    if adapter in ("openai-chat", "workers-ai"):
        return {
            "type": "function",
            "function": {
                "name": spec.name,
                "description": spec.description,
                "parameters": params,
            },
        }
    if adapter == "openai-responses":
        return {
            "type": "function",
            "name": spec.name,
            "description": spec.description,
            "parameters": params,
        }
    if adapter == "anthropic":
        return {"name": spec.name, "description": spec.description, "input_schema": params}
    raise InvalidParamsError(
        f"adapter: unknown adapter {adapter!r}; known adapters: anthropic, openai-chat, "
        "openai-responses, workers-ai",
        data={"field": "adapter"},
    )


def tool_definitions(adapter: str, specs: Iterable[ToolSpec]) -> list[dict[str, Any]]:
    """``specs`` as the provider behind ``adapter`` takes them (``InvalidParamsError``
    naming ``adapter`` for an unknown one)."""
    return [_one(adapter, spec) for spec in specs]
