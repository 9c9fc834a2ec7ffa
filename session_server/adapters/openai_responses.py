"""OpenAI Responses API format: ``{"instructions": ..., "input": [...]}`` (pure).

The result is ready for ``client.responses.create(instructions=..., input=...)``; every
``input`` item is a ``ResponseInputItemParam``.

Choice: the system instructions go to the top-level ``instructions`` field (joined by a
blank line), not to a leading ``system`` input item. ``instructions`` is the Responses
API's own slot for them: it applies to this request only and is not carried over when a
later request chains with ``previous_response_id``, which is what a working context,
rebuilt for every request, wants. ``instructions`` is omitted when there are none.
``system`` messages inside the context (memory blocks, compaction notes) are kept in
place as ``{"type": "message", "role": "system"}`` input items.

Items:

- user messages: ``{"type": "message", "role": "user", "content": <str>}``, or, when the
  message has ``images``, content parts: ``input_text`` (when the text is non-empty) then
  one ``input_image`` per URL (``detail: "auto"``; ``data:`` URLs passed unchanged);
- assistant messages: a ``message`` item with the text (omitted when the message has tool
  calls and no text), then one native ``function_call`` item per tool call
  (``call_id``, ``name``, ``arguments`` a compact JSON string, or the string the model
  sent when it was stored as one, malformed JSON included; no item ``id``: the
  provider's ``fc_...`` ids are not known here). Consecutive assistant messages with
  tool calls (the API's own shape, one ``function_call`` per item) stay consecutive
  items, their outputs after them;
- tool results: ``function_call_output`` items paired by ``call_id``; ``output`` is the
  content (a compacted placeholder passes through as it is), or, with images, a list of
  ``input_text``/``input_image`` parts. The format has no error flag: an error result
  (``is_error``) is sent as its content, unchanged;
- ``reasoning``, ``metadata`` and ``name`` are never sent.

- a message that keeps ``openai-responses`` provider items (see :mod:`adapters.ingest`)
  and was not compacted is sent as those items, verbatim (item ids, encrypted reasoning,
  hosted-tool calls, multi-part content); provider items of other formats are left out.

Refused with ``RenderError``: the tool pairing problems of :mod:`session_server.adapters.checks`, and
images on system or assistant messages.

Ingest (``from_response``): a ``Response`` (object or dict), or a list of Responses items
(output items, or the input items the OpenAI Agents SDK stores), becomes messages:

- ``message`` items with role ``user``, ``system`` or ``developer`` (``developer`` reads as
  ``system``) become one message each: the text parts joined by a newline, ``input_image``
  URLs as ``images``;
- the items of one model turn (assistant ``message``, ``reasoning``, ``function_call`` and
  the other client-executed calls that carry a ``call_id``, hosted-tool calls such as
  ``web_search_call``, and items of any type this module does not know) are grouped into
  one assistant message: text joined by a newline, reasoning summary and reasoning text in
  ``reasoning``, every call in ``tool_calls`` (parallel calls stay one message), so a
  provider's own shape needs no regrouping. A call's ``arguments`` string is decoded (the
  string the model sent when it is not a JSON object); a call without
  ``arguments`` keeps its ``input`` (``{"input": ...}``) or its ``action`` object;
- outputs (``function_call_output`` and every ``*_output`` item with a ``call_id``) end the
  group and become ``tool`` messages: a string output as it is, list outputs as their text
  (images as ``images``), objects as compact JSON; ``name`` is the tool named by a call of
  the same batch;
- each message keeps its original items in ``metadata["provider_items"]`` when rendering it
  from its fields would not give them back exactly, so ``to_model_messages`` /
  :func:`to_input_items` give back exactly the items that were ingested.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from session_server.values.codec import arguments_text, encode_json
from session_server.values.errors import InvalidParamsError
from session_server.values.events import ContextMessage, Role, ToolCall

from .checks import check_images, check_tool_pairing
from .ingest import as_json, keep_items, parse_arguments, provider_items, require_mapping

__all__ = ["OpenAIResponsesAdapter", "adapter", "from_items", "from_response", "to_input_items"]

NAME: Final = "openai-responses"
_INPUT_ROLES: Final = frozenset({"user", "system", "developer"})


def _parts(msg: ContextMessage) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if msg.content:
        parts.append({"type": "input_text", "text": msg.content})
    parts.extend(
        {"type": "input_image", "image_url": url, "detail": "auto"} for url in msg.images or ()
    )
    return parts


def _render(msg: ContextMessage) -> list[dict[str, Any]]:
    kept = provider_items(msg, NAME)
    if kept is not None:
        return kept
    return _render_fields(msg)


def _render_fields(msg: ContextMessage) -> list[dict[str, Any]]:
    if msg.role == "tool":
        output: str | list[dict[str, Any]] = _parts(msg) if msg.images else msg.content
        return [{"type": "function_call_output", "call_id": msg.tool_call_id, "output": output}]
    if msg.role == "user":
        content: str | list[dict[str, Any]] = _parts(msg) if msg.images else msg.content
        return [{"type": "message", "role": "user", "content": content}]
    items: list[dict[str, Any]] = []
    if msg.content or not msg.tool_calls:
        items.append({"type": "message", "role": msg.role, "content": msg.content})
    items.extend(
        {
            "type": "function_call",
            "call_id": call.id,
            "name": call.name,
            "arguments": arguments_text(call.arguments),
        }
        for call in msg.tool_calls or ()
    )
    return items


@dataclass(frozen=True)
class OpenAIResponsesAdapter:
    """Renders a context as Responses API ``input`` items (see the module docstring)."""

    name: str = NAME

    def to_model_messages(
        self, system_instructions: Sequence[str], messages: Sequence[ContextMessage]
    ) -> dict[str, Any]:
        check_tool_pairing(messages)
        check_images(messages, adapter=self.name, roles=("tool", "user"))
        out: dict[str, Any] = {}
        if system_instructions:
            out["instructions"] = "\n\n".join(system_instructions)
        out["input"] = [item for msg in messages for item in _render(msg)]
        return out


adapter = OpenAIResponsesAdapter()


def to_input_items(messages: Sequence[ContextMessage]) -> list[dict[str, Any]]:
    """The ``input`` items of ``messages`` without the pairing and image checks of
    ``to_model_messages``: a stored history given back as it was written (the OpenAI
    Agents SDK session uses it), valid or not."""
    return [item for msg in messages for item in _render(msg)]


# ------------------------------------------------------------------------------- ingest


def _texts(content: Any, kinds: frozenset[str]) -> list[str]:
    if isinstance(content, str):
        return [content]
    if not isinstance(content, list):
        return []
    out: list[str] = []
    for part in content:
        if isinstance(part, dict) and part.get("type") in kinds:
            text = part.get("text", part.get("refusal"))
            if isinstance(text, str):
                out.append(text)
    return out


def _images(content: Any) -> list[str] | None:
    if not isinstance(content, list):
        return None
    urls = [
        part["image_url"]
        for part in content
        if isinstance(part, dict)
        and part.get("type") in ("input_image", "computer_screenshot")
        and isinstance(part.get("image_url"), str)
        and part["image_url"]
    ]
    return urls or None


_TEXT_PARTS: Final = frozenset({"input_text", "output_text", "text", "refusal"})
_REASONING_PARTS: Final = frozenset({"summary_text", "reasoning_text"})


def _input_message(item: dict[str, Any]) -> ContextMessage:
    role: Role = "system" if item["role"] in ("system", "developer") else "user"
    content = item.get("content")
    msg = ContextMessage(
        role=role,
        content="\n".join(_texts(content, _TEXT_PARTS)),
        images=_images(content) if role == "user" else None,
    )
    return keep_items(msg, NAME, [item], _render_fields(msg))


def _call(item: dict[str, Any]) -> ToolCall:
    if "arguments" in item:
        arguments = parse_arguments(item["arguments"])
    elif "input" in item:
        arguments = {"input": item["input"]}
    elif isinstance(item.get("action"), dict):
        arguments = dict(item["action"])
    else:
        arguments = {}
    name = item.get("name")
    return ToolCall(
        id=str(item["call_id"]),
        name=name if isinstance(name, str) and name else str(item.get("type", "tool")),
        arguments=arguments,
    )


def _is_call(item: dict[str, Any]) -> bool:
    kind = item.get("type")
    return (
        isinstance(kind, str)
        and kind.endswith("_call")
        and isinstance(item.get("call_id"), str)
        and bool(item["call_id"])
    )


def _is_output(item: dict[str, Any]) -> bool:
    kind = item.get("type")
    return (
        isinstance(kind, str)
        and kind.endswith("_output")
        and isinstance(item.get("call_id"), str)
        and bool(item["call_id"])
    )


def _tool_message(item: dict[str, Any], names: dict[str, str]) -> ContextMessage:
    output = item.get("output")
    images: list[str] | None = None
    if isinstance(output, str):
        content = output
    elif isinstance(output, list):
        content = "\n".join(_texts(output, _TEXT_PARTS))
        images = _images(output)
    elif isinstance(output, dict) and output.get("type") == "computer_screenshot":
        content, images = "", _images([output])
    else:
        content = "" if output is None else encode_json(output)
    call_id = str(item["call_id"])
    msg = ContextMessage(
        role="tool", content=content, tool_call_id=call_id, name=names.get(call_id), images=images
    )
    return keep_items(msg, NAME, [item], _render_fields(msg))


@dataclass
class _Turn:
    """The items of one model turn, grouped into one assistant message."""

    items: list[dict[str, Any]] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)

    def add(self, item: dict[str, Any], names: dict[str, str]) -> None:
        self.items.append(item)
        kind = item.get("type")
        if kind == "reasoning":
            self.reasoning.extend(_texts(item.get("summary"), _REASONING_PARTS))
            self.reasoning.extend(_texts(item.get("content"), _REASONING_PARTS))
        elif _is_call(item):
            call = _call(item)
            names[call.id] = call.name
            self.calls.append(call)
        elif item.get("role") == "assistant" and kind in (None, "message"):
            self.texts.extend(_texts(item.get("content"), _TEXT_PARTS))

    def message(self) -> ContextMessage:
        msg = ContextMessage(
            role="assistant",
            content="\n".join(self.texts),
            tool_calls=list(self.calls) or None,
            reasoning="\n".join(self.reasoning) if self.reasoning else None,
        )
        return keep_items(msg, NAME, self.items, _render_fields(msg))


def from_items(items: Sequence[Any]) -> list[ContextMessage]:
    """Messages for Responses items (input or output items, dicts or SDK objects), in
    order; see the module docstring for the grouping. Raises ``InvalidParamsError`` for an
    item that is not an object."""
    out: list[ContextMessage] = []
    names: dict[str, str] = {}
    turn = _Turn()
    for i, raw in enumerate(items):
        item = require_mapping(as_json(raw), f"items[{i}]")
        role = item.get("role")
        if item.get("type") in (None, "message") and role in _INPUT_ROLES:
            if turn.items:
                out.append(turn.message())
                turn = _Turn()
            out.append(_input_message(item))
        elif _is_output(item):
            if turn.items:
                out.append(turn.message())
                turn = _Turn()
            out.append(_tool_message(item, names))
        else:
            turn.add(item, names)
    if turn.items:
        out.append(turn.message())
    return out


def from_response(payload: Any) -> list[ContextMessage]:
    """Messages for a model's output: a ``Response`` (SDK object or ``model_dump()`` dict,
    its ``output`` is read), a list of output items, or one item."""
    data = as_json(payload)
    if isinstance(data, dict) and isinstance(data.get("output"), list):
        return from_items(data["output"])
    if isinstance(data, dict):
        return from_items([data])
    if isinstance(data, list):
        return from_items(data)
    raise InvalidParamsError(
        f"payload: expected a Response, a list of items or an item, got {type(data).__name__}",
        data={"field": "payload"},
    )
