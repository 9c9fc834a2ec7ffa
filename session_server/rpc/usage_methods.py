"""RPC methods of usage, budgets and retention (DESIGN §12 "Usage and retention").

``memory.usage``, ``memory.usage_chart`` (what the inspector draws), ``memory.set_budget``
/ ``memory.get_budget`` (the agent's budget; a session's is set with ``session.update``),
``retention.set`` / ``retention.get`` / ``retention.preview``. Their rows are in
``rpc.table``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from .method_spec import CallContext, RpcParams
from .params import JsonObject, SessionId

__all__ = [
    "BudgetParams",
    "ChartParams",
    "NoBudgetParams",
    "RetentionGetParams",
    "RetentionPreviewParams",
    "RetentionSetParams",
    "UsageParams",
    "memory_get_budget",
    "memory_set_budget",
    "memory_usage",
    "memory_usage_chart",
    "retention_get",
    "retention_preview",
    "retention_set",
]

Ms = Annotated[int, Field(ge=0, le=2**53)]


class UsageParams(RpcParams):
    session_id: SessionId | None = None
    since: Ms | None = None
    until: Ms | None = None
    group_by: Literal["session", "model", "day"] | None = None


class ChartParams(RpcParams):
    session_id: SessionId
    limit: Annotated[int, Field(ge=1, le=2000)] = 500


class BudgetParams(RpcParams):
    budget: JsonObject | None


class NoBudgetParams(RpcParams):
    pass


class RetentionSetParams(RpcParams):
    policy: JsonObject | None
    session_id: SessionId | None = None


class RetentionGetParams(RpcParams):
    session_id: SessionId | None = None


class RetentionPreviewParams(RpcParams):
    policy: JsonObject | None = None
    session_id: SessionId | None = None


async def memory_usage(ctx: CallContext, p: UsageParams) -> dict[str, Any]:
    """Usage totals (input, output, cached input, cache writes, reasoning, turns, cost
    when every model in them is priced) of the agent or one session, in ``[since,
    until)`` (ms), with ``groups`` per session, model or UTC day when asked."""
    return await (await ctx.actor()).memory_usage(
        session_id=p.session_id, since=p.since, until=p.until, group_by=p.group_by
    )


async def memory_usage_chart(ctx: CallContext, p: ChartParams) -> dict[str, Any]:
    """A session's newest ``limit`` turns with their usage, its compactions, totals,
    budget and expiry."""
    actor = await ctx.actor()
    chart = await actor.usage_chart(p.session_id, p.limit)
    chart["expires_at"] = (await actor.retention_get(p.session_id))["expires_at"]
    return chart


async def memory_set_budget(ctx: CallContext, p: BudgetParams) -> dict[str, Any]:
    """Set the agent's budget (``null`` clears it): ``{budget}``."""
    return await (await ctx.actor()).set_budget(p.budget)


async def memory_get_budget(ctx: CallContext, p: NoBudgetParams) -> dict[str, Any]:
    return await (await ctx.actor()).get_budget()


async def retention_set(ctx: CallContext, p: RetentionSetParams) -> dict[str, Any]:
    """Store a retention policy for the agent or one session (``null`` clears it)."""
    return await (await ctx.actor()).retention_set(p.policy, p.session_id)


async def retention_get(ctx: CallContext, p: RetentionGetParams) -> dict[str, Any]:
    return await (await ctx.actor()).retention_get(p.session_id)


async def retention_preview(ctx: CallContext, p: RetentionPreviewParams) -> dict[str, Any]:
    """What the stored policies (or ``policy`` in their place) would remove now."""
    return await (await ctx.actor()).retention_preview(p.policy, p.session_id)
