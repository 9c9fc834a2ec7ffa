"""Tools a model may call through ``memory.tool_call`` (I/O shell): their table and runner.

``MODEL_TOOLS`` maps a tool's name to a ``ModelTool``: its ``ToolSpec`` (name,
description, JSON schema of the arguments: what ``memory.tools`` renders per adapter)
and ``run(call)``, an async function of a ``ToolCallContext`` returning the tool-result
text. To add a tool, write its spec and runner and add one entry to ``MODEL_TOOLS``
(``register_tool`` does it for a module of its own); a runner raises ``ToolError`` for a
result the model should read as an error (bad arguments, nothing found to edit).

``call_tool`` parses the arguments (an object, or the JSON string a model sends), runs
the tool and bounds its text to ``MAX_TOOL_RESULT_CHARS``: a tool result never blows the
context it is meant to protect.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

import msgspec

from ..adapters.tools import ToolSpec
from ..values.block_tools import BLOCK_TOOLS
from ..values.errors import InvalidParamsError, NotFoundError
from ..values.recall import SNIPPET_CLOSE, SNIPPET_OPEN, clip


class ToolActor(Protocol):
    """What the tools use of the actor (``ToolActor`` is one); a new tool that needs
    more adds the method here."""

    async def get_session(self, session_id: str) -> dict[str, Any] | None: ...

    async def search(
        self,
        query: str,
        *,
        session_id: str | None = ...,
        limit: int = ...,
        sessions: Iterable[str] | None = ...,
    ) -> dict[str, Any]: ...

    async def expand(
        self, session_id: str, from_seq: int, to_seq: int, *, limit: int = ...
    ) -> dict[str, Any]: ...

    async def run_block_tool(
        self, session_id: str, name: str, arguments: Any, tool_call_id: str | None = None
    ) -> tuple[str, bool]: ...


__all__ = [
    "MAX_TOOL_RESULT_CHARS",
    "MODEL_TOOLS",
    "ModelTool",
    "ToolActor",
    "ToolCallContext",
    "ToolError",
    "call_tool",
    "register_tool",
]

MAX_TOOL_RESULT_CHARS: Final = 8_000
MAX_EVENT_CHARS: Final = 1_500
MAX_EXPAND_EVENTS: Final = 40
MAX_ARGUMENT_CHARS: Final = 64_000


class ToolError(Exception):
    """A tool's answer the model should read as an error (``is_error: true``)."""


@dataclass(frozen=True, slots=True)
class ToolCallContext:
    """One call: the actor, the session the call is made in, the sessions the caller may
    read (``None``: all), the parsed arguments."""

    actor: ToolActor
    session_id: str
    sessions: frozenset[str] | None
    arguments: Mapping[str, Any]
    tool_call_id: str | None = None


ToolRunner = Callable[[ToolCallContext], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class ModelTool:
    spec: ToolSpec
    run: ToolRunner


def _arg_int(args: Mapping[str, Any], name: str, default: int | None, low: int, high: int) -> int:
    value = args.get(name, default)
    if value is None:
        raise ToolError(f"argument {name!r} is required (an integer)")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ToolError(f"argument {name!r} must be an integer, got {value!r}"[:200])
    return max(low, min(high, value))


RECALL_SEARCH = ToolSpec(
    name="recall_search",
    description=(
        "Search everything said earlier in this agent's conversations, including turns "
        "that were summarised out of your context. Plain words match anywhere (all must "
        'match); put an exact phrase in "double quotes". Returns the best matches with '
        "their session_id and seq; read the full events around a match with recall_expand."
    ),
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "words or a quoted phrase to find"},
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 20,
                "description": "how many matches (default 5)",
            },
            "all_sessions": {
                "type": "boolean",
                "description": "search every session of this agent, not only this one "
                "(default false)",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    },
)

RECALL_EXPAND = ToolSpec(
    name="recall_expand",
    description=(
        "Read the raw events of a session between two seqs (inclusive), as they were "
        "written, even if they were summarised out of your context. Use the session_id and "
        "seq a recall_search match gave (for example from_seq=seq-2, to_seq=seq+2)."
    ),
    parameters={
        "type": "object",
        "properties": {
            "from_seq": {"type": "integer", "minimum": 1},
            "to_seq": {"type": "integer", "minimum": 1},
            "session_id": {
                "type": "string",
                "description": "the session to read (default: this one)",
            },
        },
        "required": ["from_seq", "to_seq"],
        "additionalProperties": False,
    },
)


async def _recall_search(call: ToolCallContext) -> str:
    query = call.arguments.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ToolError("argument 'query' is required (the words to search for)")
    limit = _arg_int(call.arguments, "limit", 5, 1, 20)
    everywhere = call.arguments.get("all_sessions") is True
    try:
        found = await call.actor.search(
            query,
            session_id=None if everywhere else call.session_id,
            limit=limit,
            sessions=call.sessions,
        )
    except InvalidParamsError as exc:
        raise ToolError(exc.message) from None
    hits = found["hits"]
    lines = []
    if found["indexing"]:
        lines.append("(the index is still being built: older events may be missing)")
    if not hits:
        lines.append(f"No match for {query!r}.")
        return "\n".join(lines)
    lines.append(f"{len(hits)} match(es), best first:")
    for hit in hits:
        where = "in your context" if hit["in_context"] else "summarised out of your context"
        snippet = hit["snippet"].replace(SNIPPET_OPEN, "").replace(SNIPPET_CLOSE, "")
        lines.append(
            f"- session_id={hit['session_id']} seq={hit['seq']} ({hit['action']}, {where}): "
            f"{clip(' '.join(snippet.split()), 400)}"
        )
    return "\n".join(lines)


def _event_line(event: Mapping[str, Any]) -> str:
    action = event.get("action")
    text = str(event.get("content") or "")
    if action == "tool_call_request":
        calls = event.get("tool_calls") or []
        text = " ".join(
            f"{c.get('name')}({msgspec.json.encode(c.get('arguments')).decode()})" for c in calls
        ) + (f" {text}" if text else "")
    elif action == "tool_result":
        text = f"{event.get('tool_name') or 'tool'} -> {text}"
    elif action == "compaction":
        text = "(compaction record)"
    return f"#{event.get('seq')} {action}: {clip(' '.join(text.split()), MAX_EVENT_CHARS)}"


async def _recall_expand(call: ToolCallContext) -> str:
    from_seq = _arg_int(call.arguments, "from_seq", None, 1, 2**62)
    to_seq = _arg_int(call.arguments, "to_seq", None, 1, 2**62)
    session_id = call.arguments.get("session_id", call.session_id)
    if not isinstance(session_id, str) or not session_id:
        raise ToolError("argument 'session_id' must be a session id")
    if call.sessions is not None and session_id not in call.sessions:
        raise ToolError(f"session {session_id!r} is not one this caller may read")
    if to_seq < from_seq:
        raise ToolError(f"to_seq {to_seq} is before from_seq {from_seq}")
    to_seq = min(to_seq, from_seq + MAX_EXPAND_EVENTS - 1)
    try:
        found = await call.actor.expand(session_id, from_seq, to_seq, limit=MAX_EXPAND_EVENTS)
    except (InvalidParamsError, NotFoundError) as exc:
        raise ToolError(exc.message) from None
    events = found["events"]
    if not events:
        return f"No events in session {session_id} between seq {from_seq} and {to_seq}."
    head = f"Session {session_id}, events {from_seq}..{to_seq}:"
    return "\n".join([head, *(_event_line(e) for e in events)])


def _block_tool(name: str) -> ToolRunner:
    """The runner of the memory-block tool ``name`` (``values.block_tools``): a revision
    by the model, with the call's id."""

    async def run(call: ToolCallContext) -> str:
        content, is_error = await call.actor.run_block_tool(
            call.session_id, name, dict(call.arguments), call.tool_call_id
        )
        if is_error:
            raise ToolError(content.removeprefix("Error: "))
        return content

    return run


MODEL_TOOLS: dict[str, ModelTool] = {
    RECALL_SEARCH.name: ModelTool(RECALL_SEARCH, _recall_search),
    RECALL_EXPAND.name: ModelTool(RECALL_EXPAND, _recall_expand),
    **{
        tool["name"]: ModelTool(
            ToolSpec(tool["name"], tool["description"], tool["parameters"]),
            _block_tool(tool["name"]),
        )
        for tool in BLOCK_TOOLS
    },
}
"""Every tool ``memory.tools`` offers and ``memory.tool_call`` runs, by name."""


def register_tool(spec: ToolSpec, run: ToolRunner) -> None:
    """Add a tool to ``MODEL_TOOLS`` (``ValueError`` if the name is taken)."""
    if spec.name in MODEL_TOOLS:
        raise ValueError(f"a model tool named {spec.name!r} exists already")
    MODEL_TOOLS[spec.name] = ModelTool(spec, run)


def _parse_arguments(arguments: Any) -> Mapping[str, Any]:
    if isinstance(arguments, str):
        if len(arguments) > MAX_ARGUMENT_CHARS:
            raise ToolError(f"arguments: at most {MAX_ARGUMENT_CHARS} characters")
        if not arguments.strip():
            return {}
        try:
            arguments = msgspec.json.decode(arguments)
        except msgspec.DecodeError as exc:
            raise ToolError(f"arguments are not valid JSON ({exc})"[:300]) from None
    if not isinstance(arguments, Mapping):
        raise ToolError("arguments must be a JSON object")
    return arguments


async def call_tool(
    actor: ToolActor,
    session_id: str,
    name: str,
    arguments: Any,
    *,
    sessions: frozenset[str] | None = None,
    tool_call_id: str | None = None,
) -> dict[str, Any]:
    """Run the tool ``name``: ``{content, is_error}``, ``content`` at most
    ``MAX_TOOL_RESULT_CHARS``. A tool the model got wrong (unknown name, bad arguments)
    is an error result the model reads, not a refused request; an unknown session is
    ``NotFoundError``."""
    if await actor.get_session(session_id) is None:
        raise NotFoundError.session(session_id)
    tool = MODEL_TOOLS.get(name)
    try:
        if tool is None:
            known = ", ".join(sorted(MODEL_TOOLS))
            raise ToolError(f"unknown tool {name!r}; the tools are: {known}"[:500])
        args = _parse_arguments(arguments)
        content = await tool.run(ToolCallContext(actor, session_id, sessions, args, tool_call_id))
        is_error = False
    except ToolError as exc:
        content, is_error = f"Error: {exc}", True
    return {"content": clip(content, MAX_TOOL_RESULT_CHARS), "is_error": is_error}
