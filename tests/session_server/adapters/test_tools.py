"""Tool definitions in each provider's format (pure)."""

from __future__ import annotations

import pytest

from session_server.adapters import names
from session_server.adapters.tools import ToolSpec, tool_definitions
from session_server.values.errors import InvalidParamsError

SPEC = ToolSpec("t", "does t", {"type": "object", "properties": {"a": {"type": "string"}}})


def test_each_adapter_has_its_provider_format() -> None:
    params = SPEC.parameters
    assert tool_definitions("openai-chat", [SPEC]) == [
        {
            "type": "function",
            "function": {"name": "t", "description": "does t", "parameters": params},
        }
    ]
    assert tool_definitions("workers-ai", [SPEC]) == tool_definitions("openai-chat", [SPEC])
    assert tool_definitions("openai-responses", [SPEC]) == [
        {"type": "function", "name": "t", "description": "does t", "parameters": params}
    ]
    assert tool_definitions("anthropic", [SPEC]) == [
        {"name": "t", "description": "does t", "input_schema": params}
    ]
    for name in names():
        (tool,) = tool_definitions(name, [SPEC])
        assert tool is not None


def test_definitions_are_copies() -> None:
    (tool,) = tool_definitions("anthropic", [SPEC])
    tool["input_schema"]["properties"]["b"] = {}
    assert "b" not in SPEC.parameters["properties"]


def test_unknown_adapter_names_the_field() -> None:
    with pytest.raises(InvalidParamsError, match="adapter"):
        tool_definitions("nope", [SPEC])
