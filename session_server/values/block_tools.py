"""The model's memory-block tools: their definitions and the edits they make (pure).

``BLOCK_TOOLS`` are the definitions a model is offered (name, description, JSON schema
of the arguments; the shape ``memory.tools`` answers). ``plan_block_edit`` turns one call
into the block's new value, or a ``BlockToolError`` whose message tells the model what
to do instead (the label is unknown, ``old`` is absent or ambiguous, the value is past
the block's limit). The model edits blocks that exist: the client or an operator creates
them, with their description and limit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import msgspec

from .blocks import MAX_VALUE_CHARS, BlockRevision, BlockSet

__all__ = [
    "BLOCK_TOOLS",
    "BLOCK_TOOL_NAMES",
    "MAX_TOOL_TEXT_CHARS",
    "BlockEdit",
    "BlockToolError",
    "plan_block_edit",
]

# The longest text a tool argument may carry (characters); the block's token limit is
# the real bound, this one keeps a runaway argument from being tokenised at all.
MAX_TOOL_TEXT_CHARS: Final = MAX_VALUE_CHARS

_LABEL_SCHEMA: Final = {
    "type": "string",
    "description": "The block's label, as shown in its header [label · ...].",
}

BLOCK_TOOLS: Final[tuple[dict[str, Any], ...]] = (
    {
        "name": "memory_block_set",
        "description": (
            "Replace the whole value of a memory block. Use it to rewrite a block; to add "
            "a line use memory_block_append, to change one passage memory_block_replace."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "label": _LABEL_SCHEMA,
                "value": {"type": "string", "description": "The block's new value."},
            },
            "required": ["label", "value"],
            "additionalProperties": False,
        },
    },
    {
        "name": "memory_block_append",
        "description": "Add text at the end of a memory block (on a new line).",
        "parameters": {
            "type": "object",
            "properties": {
                "label": _LABEL_SCHEMA,
                "text": {"type": "string", "description": "The text to add."},
            },
            "required": ["label", "text"],
            "additionalProperties": False,
        },
    },
    {
        "name": "memory_block_replace",
        "description": (
            "Replace one exact passage of a memory block with new text. `old` must occur "
            "exactly once in the block (quote it exactly, with enough context to be "
            "unique); an empty `new` deletes the passage."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "label": _LABEL_SCHEMA,
                "old": {"type": "string", "description": "The exact text to replace."},
                "new": {"type": "string", "description": "The text to put in its place."},
            },
            "required": ["label", "old", "new"],
            "additionalProperties": False,
        },
    },
)

BLOCK_TOOL_NAMES: Final = frozenset(t["name"] for t in BLOCK_TOOLS)
_ARGUMENTS: Final[dict[str, frozenset[str]]] = {
    t["name"]: frozenset(t["parameters"]["properties"]) for t in BLOCK_TOOLS
}


class BlockToolError(Exception):
    """A call the model can correct: the message says how."""


class BlockEdit(msgspec.Struct, frozen=True):
    """What one tool call writes: ``value`` as the new revision of ``block``."""

    block: BlockRevision
    value: str


def _text(arguments: Mapping[str, Any], name: str, *, empty: bool = True) -> str:
    value = arguments.get(name)
    if not isinstance(value, str):
        raise BlockToolError(f"argument {name!r}: required, a string")
    if not empty and not value:
        raise BlockToolError(f"argument {name!r}: must not be empty")
    if len(value) > MAX_TOOL_TEXT_CHARS:
        raise BlockToolError(f"argument {name!r}: too long ({len(value)} characters)")
    return value


def plan_block_edit(name: str, arguments: object, blocks: BlockSet) -> BlockEdit:
    """The new value one tool call gives its block (``BlockToolError`` otherwise).

    The label names the session's block, else the agent's (a session block shadows an
    agent block of the same label). The token limit is checked by the writer, which
    counts the value.
    """
    if name not in BLOCK_TOOL_NAMES:
        raise BlockToolError(
            f"unknown tool {name!r}; the memory block tools are "
            + ", ".join(sorted(BLOCK_TOOL_NAMES))
        )
    if not isinstance(arguments, Mapping):
        raise BlockToolError("arguments: must be a JSON object")
    expected = _ARGUMENTS[name]
    unknown = sorted(str(k) for k in arguments if k not in expected)
    if unknown:
        raise BlockToolError(f"unknown argument(s) {', '.join(map(repr, unknown))}")
    label = _text(arguments, "label", empty=False)
    block = blocks.find(label)
    if block is None:
        known = blocks.labels()
        hint = (
            "the blocks you can edit are " + ", ".join(repr(k) for k in known)
            if known
            else "there are no memory blocks to edit"
        )
        raise BlockToolError(f"no memory block {label!r}; {hint}")
    current = block.value
    if name == "memory_block_set":
        return _edit(block, _text(arguments, "value"))
    if name == "memory_block_append":
        text = _text(arguments, "text", empty=False)
        sep = "" if not current or current.endswith("\n") else "\n"
        return _edit(block, current + sep + text)
    old = _text(arguments, "old", empty=False)
    new = _text(arguments, "new")
    count = current.count(old)
    if count == 0:
        raise BlockToolError(
            f"`old` does not occur in block {label!r}; quote the block's current text "
            "exactly (it is in your instructions, under the block's header)"
        )
    if count > 1:
        raise BlockToolError(
            f"`old` occurs {count} times in block {label!r}; include more of the "
            "surrounding text so that it occurs exactly once"
        )
    return _edit(block, current.replace(old, new, 1))


def _edit(block: BlockRevision, value: str) -> BlockEdit:
    if len(value) > MAX_TOOL_TEXT_CHARS:
        raise BlockToolError(
            f"block {block.label!r} would be {len(value)} characters, far past its limit of "
            f"{block.max_tokens} tokens; shorten it"
        )
    return BlockEdit(block, value)
