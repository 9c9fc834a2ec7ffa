"""The nesting bound of the JSON a client gives (pure).

Params, and every JSON value inside them (message metadata, tool call arguments, session
metadata, strategies, files' lines), may nest at most ``MAX_JSON_DEPTH`` levels, the
params object itself being level 1; a tool call's arguments given as a JSON string (as
models send them) may hold at most ``MAX_JSON_DEPTH`` levels too. Deeper values are
refused with -32602 naming the field: decoders, encoders and validators recurse, and a
value nested near Python's recursion limit failed deep inside the server, -32603.

``may_nest_deeper`` is the cheap test run first: a text with at most ``limit`` opening
brackets cannot nest deeper; ``text_depth`` then measures a text's depth without
walking its values, so the walk that names the field runs only for a value too deep.
"""

from __future__ import annotations

import re
from array import array
from itertools import accumulate
from typing import Any, Final

import msgspec

__all__ = [
    "MAX_JSON_DEPTH",
    "deep_path",
    "json_text_too_deep",
    "may_nest_deeper",
    "nests_deeper",
    "text_depth",
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


_STRING: Final = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS: Final = bytes(sorted(set(range(256)) - set(b"[]{}")))
_SIGNS: Final = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")


def text_depth(text: str | bytes) -> int:
    """The nesting depth of the JSON text ``text`` (valid JSON): its brackets outside
    strings, counted in C (a regular expression drops the strings, ``translate`` keeps
    the brackets as +1/-1, ``accumulate`` finds the deepest point); no value is walked."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    brackets = _STRING.sub(b"", data).translate(None, _NOT_BRACKETS)
    return max(accumulate(array("b", brackets.translate(_SIGNS))), default=0)


def _too_deep(value: Any, limit: int) -> bool:
    """``nests_deeper`` without paths: only containers are visited, a level at a time."""
    level = [value] if isinstance(value, (dict, list)) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        below: list[Any] = []
        for item in level:
            children = item.values() if isinstance(item, dict) else item
            below.extend(c for c in children if isinstance(c, (dict, list)))
        level = below
    return False


def deep_path(value: Any, path: str = "params", limit: int = MAX_JSON_DEPTH) -> str | None:
    """The path of the first array or object of ``value`` (``value`` itself at level 1)
    nested deeper than ``limit`` levels, in document order; ``None`` when none is."""
    if not _too_deep(value, limit):
        return None  # the common case: no path is built
    stack: list[tuple[Any, str, int]] = [(value, path, 1)]
    while stack:
        item, where, level = stack.pop()
        if level > limit:
            return where
        if isinstance(item, dict):
            stack.extend(
                (v, f"{where}.{k}", level + 1)
                for k, v in reversed(item.items())
                if isinstance(v, (dict, list))
            )
        elif isinstance(item, list):
            stack.extend(
                (v, f"{where}[{i}]", level + 1)
                for i, v in reversed(list(enumerate(item)))
                if isinstance(v, (dict, list))
            )
    return None


def nests_deeper(value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``value`` nests deeper than ``limit`` levels."""
    return _too_deep(value, limit)


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
