"""Handlers and params of the recall methods (DESIGN §12 "Recall"): ``memory.search``,
``memory.expand``, ``memory.tools``, ``memory.tool_call`` and ``memory.reindex``. Their
rows are in ``rpc.table``; the work is ``runtime.recall`` and ``runtime.model_tools``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field

from ..adapters.tools import tool_definitions
from ..runtime.model_tools import MAX_ARGUMENT_CHARS, MODEL_TOOLS
from ..runtime.recall import MAX_EXPAND, MAX_SEARCH_LIMIT
from ..values.errors import ForbiddenError
from ..values.events import Action
from ..values.recall import MAX_QUERY_CHARS
from .method_spec import CallContext, RpcParams
from .params import JsonObject, SessionId

__all__ = [
    "ExpandParams",
    "ReindexParams",
    "SearchParams",
    "ToolCallParams",
    "ToolsParams",
    "memory_expand",
    "memory_reindex",
    "memory_search",
    "memory_tool_call",
    "memory_tools",
]

Seq = Annotated[int, Field(ge=1, le=2**62)]


class SearchParams(RpcParams):
    # Longer text is cut to MAX_QUERY_CHARS by the query builder; past ten times that
    # the request is refused rather than carried.
    query: Annotated[str, Field(max_length=MAX_QUERY_CHARS * 10)]
    session_id: SessionId | None = None
    limit: Annotated[int, Field(ge=1, le=MAX_SEARCH_LIMIT)] = 10
    after_seq: Annotated[int, Field(ge=0, le=2**62)] | None = None
    before_seq: Seq | None = None
    actions: (
        Annotated[
            list[Action], Field(max_length=16), AfterValidator(lambda v: list(dict.fromkeys(v)))
        ]
        | None
    ) = None


class ExpandParams(RpcParams):
    session_id: SessionId
    from_seq: Seq
    to_seq: Seq
    limit: Annotated[int, Field(ge=1, le=MAX_EXPAND)] = 200


class ToolsParams(RpcParams):
    adapter: Literal["openai-chat", "openai-responses", "anthropic", "workers-ai"]


class ToolCallParams(RpcParams):
    session_id: SessionId
    name: Annotated[str, Field(min_length=1, max_length=128)]
    arguments: JsonObject | Annotated[str, Field(max_length=MAX_ARGUMENT_CHARS)] = Field(
        default_factory=dict
    )
    # The model's id of the call: a memory block the tool writes records it.
    tool_call_id: Annotated[str, Field(min_length=1, max_length=256)] | None = None


class ReindexParams(RpcParams):
    pass


def _sessions(ctx: CallContext) -> frozenset[str] | None:
    return None if ctx.grant is None else ctx.grant.sessions


async def memory_search(ctx: CallContext, p: SearchParams) -> dict[str, Any]:
    """``{hits: [{session_id, seq, event_id, action, snippet, score, in_context}],
    indexing}``, best first. A token limited to sessions searches only those."""
    if p.session_id is not None and not ctx.permits_session(p.session_id):
        raise ForbiddenError(
            f"session_id: this token may not read session {p.session_id!r}",
            data={"field": "session_id"},
        )
    return await (await ctx.actor()).search(
        p.query,
        session_id=p.session_id,
        limit=p.limit,
        after_seq=p.after_seq,
        before_seq=p.before_seq,
        actions=p.actions,
        sessions=_sessions(ctx),
    )


async def memory_expand(ctx: CallContext, p: ExpandParams) -> dict[str, Any]:
    """``{messages, events}``: the raw events of ``from_seq..to_seq``, compacted or not."""
    return await (await ctx.actor()).expand(p.session_id, p.from_seq, p.to_seq, limit=p.limit)


async def memory_tools(ctx: CallContext, p: ToolsParams) -> dict[str, Any]:
    """``{tools}``: the model tools in the adapter's provider format (the same for every
    agent: an agent that does not exist yet gets them too)."""
    return {"tools": tool_definitions(p.adapter, (t.spec for t in MODEL_TOOLS.values()))}


async def memory_tool_call(ctx: CallContext, p: ToolCallParams) -> dict[str, Any]:
    """``{content, is_error}``: one model tool run in the session ``session_id``."""
    return await (await ctx.actor()).tool_call(
        p.session_id, p.name, p.arguments, sessions=_sessions(ctx), tool_call_id=p.tool_call_id
    )


async def memory_reindex(ctx: CallContext, p: ReindexParams) -> dict[str, Any]:
    """Rebuild the agent's recall index in the background: ``{events}`` to index."""
    return {"events": await (await ctx.actor()).reindex()}
