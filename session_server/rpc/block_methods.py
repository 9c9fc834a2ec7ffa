"""RPC methods of memory blocks (DESIGN §12 "Memory blocks"): ``memory.blocks.set``,
``get``, ``list``, ``history``, ``revert`` and ``delete``.

Scopes: reads need ``read``; writes of a session's blocks ``write``; writes of the
agent's blocks (no ``session_id``) ``admin``, or ``write`` with the token's ``blocks``
claim (``Grant.allows_agent_blocks``). A token limited to sessions reaches only those
sessions' blocks (``rpc.dispatch``: ``session_id`` is required of it).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from ..values.blocks import (
    MAX_BLOCK_TOKENS,
    MAX_DESCRIPTION_CHARS,
    MAX_HISTORY_PAGE,
    MAX_REASON_CHARS,
    MAX_VALUE_CHARS,
    BlockRevision,
)
from ..values.errors import ForbiddenError
from .method_spec import CallContext, RpcParams
from .params import SessionId

__all__ = [
    "BlockDeleteParams",
    "BlockHistoryParams",
    "BlockParams",
    "BlockRevertParams",
    "BlockSetParams",
    "BlocksListParams",
    "blocks_delete",
    "blocks_get",
    "blocks_history",
    "blocks_list",
    "blocks_revert",
    "blocks_set",
]

Label = Annotated[str, Field(min_length=1, max_length=64)]
Revision = Annotated[int, Field(ge=1)]


class BlockSetParams(RpcParams):
    label: Label
    value: Annotated[str, Field(max_length=MAX_VALUE_CHARS)]
    session_id: SessionId | None = None
    description: Annotated[str, Field(max_length=MAX_DESCRIPTION_CHARS)] | None = None
    max_tokens: Annotated[int, Field(ge=1, le=MAX_BLOCK_TOKENS)] | None = None
    reason: Annotated[str, Field(max_length=MAX_REASON_CHARS)] | None = None
    expected_revision: Annotated[int, Field(ge=0)] | None = None


class BlockParams(RpcParams):
    label: Label
    session_id: SessionId | None = None


class BlocksListParams(RpcParams):
    session_id: SessionId | None = None


class BlockHistoryParams(RpcParams):
    label: Label
    session_id: SessionId | None = None
    before_revision: Revision | None = None
    limit: Annotated[int, Field(ge=1, le=MAX_HISTORY_PAGE)] = 100


class BlockRevertParams(RpcParams):
    label: Label
    revision: Revision
    session_id: SessionId | None = None
    reason: Annotated[str, Field(max_length=MAX_REASON_CHARS)] | None = None
    expected_revision: Annotated[int, Field(ge=0)] | None = None


class BlockDeleteParams(BlockParams):
    pass


def _check_agent_write(ctx: CallContext, session_id: str | None) -> None:
    if session_id is None and ctx.grant is not None and not ctx.grant.allows_agent_blocks():
        raise ForbiddenError(
            "session_id: writing the agent's memory blocks (no session_id) needs an admin "
            "token or a write token with the blocks claim",
            data={"field": "session_id"},
        )


def _block(rev: BlockRevision) -> dict[str, Any]:
    return rev.to_dict()


def _written(rev: BlockRevision) -> dict[str, Any]:
    """The answer of a write (``memory.blocks.set`` and ``revert``): the new revision."""
    return {
        "label": rev.label,
        "session_id": rev.session_id,
        "revision": rev.revision,
        "tokens": rev.tokens,
        "max_tokens": rev.max_tokens,
    }


async def blocks_set(ctx: CallContext, p: BlockSetParams) -> dict[str, Any]:
    _check_agent_write(ctx, p.session_id)
    actor = await ctx.actor()
    rev = await actor.set_block(
        p.label,
        p.value,
        session_id=p.session_id,
        description=p.description,
        max_tokens=p.max_tokens,
        reason=p.reason,
        expected_revision=p.expected_revision,
    )
    return _written(rev)


async def blocks_get(ctx: CallContext, p: BlockParams) -> dict[str, Any]:
    actor = await ctx.actor()
    return _block(await actor.get_block(p.label, p.session_id))


async def blocks_list(ctx: CallContext, p: BlocksListParams) -> dict[str, Any]:
    actor = await ctx.actor()
    blocks = await actor.list_blocks(p.session_id)
    return {"blocks": [_block(b) for b in (*blocks.agent, *blocks.session)]}


async def blocks_history(ctx: CallContext, p: BlockHistoryParams) -> dict[str, Any]:
    actor = await ctx.actor()
    revs = await actor.block_history(
        p.label, p.session_id, before_revision=p.before_revision, limit=p.limit
    )
    more = len(revs) == p.limit and revs[-1].revision > 1
    return {
        "label": p.label,
        "session_id": p.session_id,
        "revisions": [_block(r) for r in revs],
        "next_before_revision": revs[-1].revision if more else None,
    }


async def blocks_revert(ctx: CallContext, p: BlockRevertParams) -> dict[str, Any]:
    _check_agent_write(ctx, p.session_id)
    actor = await ctx.actor()
    rev = await actor.revert_block(
        p.label,
        p.revision,
        session_id=p.session_id,
        reason=p.reason,
        expected_revision=p.expected_revision,
    )
    return _written(rev)


async def blocks_delete(ctx: CallContext, p: BlockDeleteParams) -> dict[str, Any]:
    _check_agent_write(ctx, p.session_id)
    actor = await ctx.actor()
    deleted = await actor.delete_block(p.label, p.session_id)
    return {"label": p.label, "session_id": p.session_id, "deleted": deleted}
