"""What a write weighs before it is planned (pure): ``plan_size`` decides whether the
actor plans a write (validation, numbering, token counts) on the event loop or on a
worker thread (``off_loop.off_loop_if_large``), and ``no_prompt_size`` whether a
persist's pressure check counts the context itself."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import msgspec

from ..compaction.triggers import usage_prompt_tokens
from ..values.errors import InvalidParamsError
from ..values.events import ContextMessage, SessionEvent
from .off_loop import LARGE_CONTENT_CHARS

__all__ = ["ITEM_CHARS", "REENCODED_GROWTH", "no_prompt_size", "plan_size"]

_encode = msgspec.json.encode


ITEM_CHARS: Final = 128
"""What planning one item costs, in characters counted: validating, numbering and
counting an event takes about 3-5 us here, as counting about 128 characters does
(10,000 small events were planned on the event loop in 27-57 ms)."""


def plan_size(
    items: Sequence[SessionEvent | ContextMessage], content_bound: int | None = None
) -> int:
    """The size ``off_loop_if_large`` weighs: the characters of the items' content and
    arguments plus ``ITEM_CHARS`` per item. Enough items are large by their number alone
    (their characters are not walked on the loop: 200,000 messages took 80 ms).

    ``content_bound``: the size of the text the items were decoded from (the RPC frame's).
    What the walk counts is at most ``REENCODED_GROWTH`` times that (arguments given as
    objects are counted re-encoded, and a number may come back longer than it was sent).
    When that keeps the items small, it is the size given and their characters are not
    walked: what the size decides (below ``LARGE_CONTENT_CHARS`` or not) is the same, and
    the walk was a tenth of a sequential persist's loop time."""
    weight = ITEM_CHARS * len(items)
    if weight >= LARGE_CONTENT_CHARS:
        return weight
    if content_bound is not None:
        most = weight + REENCODED_GROWTH * content_bound
        if most < LARGE_CONTENT_CHARS:
            return most
    return weight + _content_chars(items)


REENCODED_GROWTH: Final = 5
"""How much longer than its JSON text a value may be once decoded and encoded again by
msgspec: whitespace and escapes only shrink, a number grows at most 4.5-fold (``1e15``
comes back as ``1000000000000000.0``)."""


def _content_chars(items: Iterable[SessionEvent | ContextMessage]) -> int:
    """Characters of content and tool-call arguments (not validated yet: a local caller
    may pass anything the validation accepts, objects too, or refuses, naming the field;
    a value of the wrong type counts as nothing)."""
    total = 0
    for item in items:  # a loop, not a generator: this runs for every persist
        if isinstance(item, ContextMessage | SessionEvent):
            content, calls = item.content, item.tool_calls
        elif isinstance(item, dict):
            content, calls = item.get("content"), item.get("tool_calls")
        else:
            continue
        if isinstance(content, str):
            total += len(content)
        if calls and isinstance(calls, list | tuple):
            total += _arguments_chars(calls)
    return total


def _arguments_chars(calls: Sequence[Any]) -> int:
    total = 0
    for call in calls:
        if isinstance(call, dict):
            arguments = call.get("arguments")
        else:
            arguments = getattr(call, "arguments", None)
        if isinstance(arguments, str):
            total += len(arguments)
        elif isinstance(arguments, dict | list) and arguments:
            # Not JSON: nothing here; the validation refuses it, naming its field.
            with contextlib.suppress(TypeError, ValueError, OverflowError, msgspec.EncodeError):
                total += len(_encode(arguments))
    return total


def no_prompt_size(usage: Mapping[str, Any] | None) -> bool:
    """Whether a persist's pressure check counts the context itself: no ``usage``, or
    one without a prompt size (only output tokens, say). A malformed count is refused
    by the check, before any count."""
    if usage is None:
        return True
    try:
        return usage_prompt_tokens(usage) is None
    except InvalidParamsError:
        return False
