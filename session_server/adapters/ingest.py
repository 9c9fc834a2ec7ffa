"""Shared helpers of the ``from_response`` ingest functions (pure).

Every adapter module turns its provider's own output into ``ContextMessage``s with
``from_response(payload)``. What a message's fields cannot hold (provider item ids,
encrypted reasoning, hosted-tool calls, arguments that are not a compact JSON object,
extra keys) is kept verbatim in the message's metadata::

    metadata["provider_format"] = "<adapter name>"     # e.g. "openai-responses"
    metadata["provider_items"] = [<item or block>, ...]  # exactly as the provider sent them

Rule: the items are kept only when rendering the message from its fields would not give
them back exactly, so a plain text answer carries no copy. The adapter named by
``provider_format`` renders such a message as its items, verbatim, unless the message was
``compacted`` (its fields then hold placeholders, which win); every other adapter renders
it from its fields and leaves the items out.

SDK objects (pydantic models of the ``openai`` and ``anthropic`` packages) are read through
their ``model_dump`` (``mode="json"``, ``exclude_unset=True``: the keys the provider
sent), so this module never imports a provider SDK.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, cast

import msgspec

from session_server.values.errors import InvalidParamsError
from session_server.values.events import ContextMessage, ToolArguments

__all__ = [
    "PROVIDER_FORMAT",
    "PROVIDER_ITEMS",
    "as_json",
    "has_foreign_items_only",
    "keep_items",
    "parse_arguments",
    "provider_items",
    "require_mapping",
]

PROVIDER_FORMAT: Final = "provider_format"
PROVIDER_ITEMS: Final = "provider_items"

_DECODER: Final = msgspec.json.Decoder()


def as_json(value: Any) -> Any:
    """``value`` as plain JSON data: SDK models through ``model_dump``, containers copied."""
    dump: Callable[..., Any] | None = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_unset=True)
    if isinstance(value, Mapping):
        return {str(k): as_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [as_json(v) for v in value]
    return value


def require_mapping(value: Any, where: str) -> dict[str, Any]:
    """``value`` (already plain JSON) as a dict, or ``InvalidParamsError`` naming ``where``."""
    if not isinstance(value, dict):
        raise InvalidParamsError(
            f"{where}: must be an object, got {type(value).__name__}", data={"field": where}
        )
    return value


def parse_arguments(raw: Any) -> ToolArguments:
    """Tool-call arguments as the project stores them (``values.events.ToolArguments``): a
    string holding a JSON object becomes that object (its exact text, when not compact,
    stays in the message's provider items); any other string (malformed JSON, JSON that is
    not an object) stays exactly as the model sent it; ``None`` is ``{}``; other values
    stay as they are."""
    if raw is None:
        return {}
    if isinstance(raw, str):
        try:
            value = _DECODER.decode(raw)
        except msgspec.DecodeError:
            return raw
        return value if isinstance(value, dict) else raw
    if isinstance(raw, dict):
        return dict(raw)
    return cast(ToolArguments, raw)


def provider_items(message: ContextMessage, fmt: str) -> list[Any] | None:
    """The verbatim items ``message`` keeps for format ``fmt``; ``None`` when it keeps none
    for that format or was compacted (placeholders win over the original items)."""
    meta = message.metadata
    if not meta or message.compacted or meta.get(PROVIDER_FORMAT) != fmt:
        return None
    items = meta.get(PROVIDER_ITEMS)
    return list(items) if isinstance(items, list) and items else None


def keep_items(
    message: ContextMessage, fmt: str, original: Sequence[Any], rendered: Sequence[Any] | None
) -> ContextMessage:
    """``message`` with ``original`` kept as its provider items when ``rendered`` (the
    message rendered from its fields; ``None``: it cannot be) differs from it; unchanged
    otherwise."""
    if rendered is not None and list(rendered) == list(original):
        return message
    meta = dict(message.metadata or {})
    meta[PROVIDER_FORMAT] = fmt
    meta[PROVIDER_ITEMS] = list(original)
    return msgspec.structs.replace(message, metadata=meta)


def has_foreign_items_only(message: ContextMessage, fmt: str) -> bool:
    """True for a message that holds nothing but another format's provider items (no text,
    no images, no tool calls): such a message has nothing to send in format ``fmt``."""
    meta = message.metadata or {}
    return (
        bool(meta.get(PROVIDER_ITEMS))
        and meta.get(PROVIDER_FORMAT) != fmt
        and not message.content
        and not message.images
        and not message.tool_calls
        and message.role != "tool"
    )
