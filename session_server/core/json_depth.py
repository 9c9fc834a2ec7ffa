"""The nesting bound of the JSON a client gives (pure).

Params, and every JSON value inside them (message metadata, tool call arguments, session
metadata, strategies, files' lines), may nest at most ``MAX_JSON_DEPTH`` levels, the
params object itself being level 1; a tool call's arguments given as a JSON string (as
models send them) may hold at most ``MAX_JSON_DEPTH`` levels too. Deeper values are
refused with -32602 naming the field: decoders, encoders and validators recurse, and a
value nested near Python's recursion limit failed deep inside the server, -32603.

``may_nest_deeper`` is the cheap test run first: a text with at most ``limit`` opening
brackets cannot nest deeper, so the walk runs only for texts with many brackets.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

__all__ = [
    "MAX_JSON_DEPTH",
    "deep_path",
    "json_text_too_deep",
    "may_nest_deeper",
    "nests_deeper",
]

MAX_JSON_DEPTH: Final = 100
"""The deepest nesting of client JSON (levels of arrays and objects; params is level 1)."""

_DECODER: Final = msgspec.json.Decoder()


def may_nest_deeper(text: str | bytes | bytearray, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON ``text`` may nest deeper than ``limit`` (it holds more opening
    brackets than that; brackets inside strings count too, so this may say yes for a
    shallow text, never no for a deep one)."""
    if isinstance(text, str):
        return text.count("[") + text.count("{") > limit
    return text.count(b"[") + text.count(b"{") > limit


def deep_path(value: Any, path: str = "params", limit: int = MAX_JSON_DEPTH) -> str | None:
    """The path of the first array or object of ``value`` (``value`` itself at level 1)
    nested deeper than ``limit`` levels, in document order; ``None`` when none is."""
    stack: list[tuple[Any, str, int]] = [(value, path, 1)]
    while stack:
        item, where, level = stack.pop()
        if isinstance(item, dict):
            if level > limit:
                return where
            stack.extend((v, f"{where}.{k}", level + 1) for k, v in reversed(item.items()))
        elif isinstance(item, list):
            if level > limit:
                return where
            stack.extend(
                (v, f"{where}[{i}]", level + 1) for i, v in reversed(list(enumerate(item)))
            )
    return None


def nests_deeper(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` nests deeper than ``limit`` levels."""
    return deep_path(value, "", limit) is not None


def json_text_too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON text ``text`` nests deeper than ``limit`` levels (text that is
    not JSON at all is not too deep: it is kept as the string it is)."""
    if not may_nest_deeper(text, limit):
        return False
    try:
        value = _DECODER.decode(text)
    except RecursionError:
        return True
    except msgspec.DecodeError:
        return False
    return nests_deeper(value, limit)
