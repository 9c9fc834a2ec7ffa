"""RPC methods of branches (DESIGN §12 "Branches"): ``session.fork``, ``session.rewind``,
``session.branches``. Their rows are in ``rpc.table``; the work is the actor's
(``runtime.branches``)."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
from pydantic import Field

from ..runtime.branches import MAX_REASON_CHARS
from .method_spec import CallContext, RpcParams
from .params import SessionId, SessionMetadata
from .protocol import INT64_MAX

__all__ = [
    "BranchesParams",
    "ForkParams",
    "RewindParams",
    "session_branches",
    "session_fork",
    "session_rewind",
]

Seq = Annotated[int, Field(ge=0, le=INT64_MAX)]


class ForkParams(RpcParams):
    session_id: SessionId
    at_seq: Seq | None = None
    new_session_id: SessionId | None = None
    metadata: SessionMetadata | None = None


class RewindParams(RpcParams):
    session_id: SessionId
    to_seq: Seq
    reason: Annotated[str, Field(max_length=MAX_REASON_CHARS)] | None = None
    erase: bool = False


class BranchesParams(RpcParams):
    session_id: SessionId


async def session_fork(ctx: CallContext, p: ForkParams) -> dict[str, Any]:
    result = await (await ctx.actor()).fork_session(
        p.session_id, at_seq=p.at_seq, new_session_id=p.new_session_id, metadata=p.metadata
    )
    out: dict[str, Any] = msgspec.to_builtins(result)
    return out


async def session_rewind(ctx: CallContext, p: RewindParams) -> dict[str, Any]:
    result = await (await ctx.actor()).rewind_session(
        p.session_id, p.to_seq, reason=p.reason, erase=p.erase
    )
    return result.to_builtins()


async def session_branches(ctx: CallContext, p: BranchesParams) -> dict[str, Any]:
    branches = await (await ctx.actor()).session_branches(p.session_id)
    return {"branches": msgspec.to_builtins(branches)}
