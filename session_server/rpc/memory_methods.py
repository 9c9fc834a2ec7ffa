"""RPC methods over compaction, rendering, the memory view and export/import (DESIGN §8).

Rows of the one method table (``rpc.table.BUILTIN_METHODS``). File reads (views,
snapshot lists) run on the registry's worker threads, never on the event loop.
Export and import move file contents inside the JSON-RPC messages: the server never
reads or writes a path a client names.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field

from session_server import adapters

from ..mirror.view import MemoryViewOptions, group_by_agent, page_snapshots
from ..mirror_io.view_files import list_snapshot_summaries, read_memory_view
from ..runtime import backups, transfer
from ..runtime.off_loop import release_after_response
from ..storage.stored_rows import SKIPPED_RECORDS
from .method_spec import CallContext, RpcParams
from .params import Instructions, JsonObject, NoParams, SessionId

__all__ = [
    "adapters_list",
    "agent_backup",
    "agent_restore",
    "context_render",
    "export_session",
    "import_session",
    "memory_compact",
    "memory_get_strategy",
    "memory_list_snapshots",
    "memory_set_strategy",
    "memory_view",
    "metrics_get",
]

Limit = Annotated[int, Field(ge=1)]
RENDER_ON_LOOP_ITEMS = 256
"""A context of more messages is rendered on a worker thread: rendering is linear in the
messages (100k took 430 ms of the event loop), a worker round trip costs about 0.1 ms."""
T = TypeVar("T")


async def _off_loop(ctx: CallContext, fn: Callable[[], T]) -> T:
    """Run blocking file reads on the registry's worker threads."""
    return await ctx.registry.executor.run(fn)


class StrategyQuery(RpcParams):
    session_id: SessionId | None = None


class SetStrategyParams(RpcParams):
    session_id: SessionId | None = None
    strategy: JsonObject | None


class CompactParams(RpcParams):
    session_id: SessionId
    strategy: JsonObject | None = None
    system_instructions: Instructions = None


class RenderParams(RpcParams):
    session_id: SessionId
    adapter: Annotated[str, Field(min_length=1)]
    system_instructions: Instructions = None
    strategy: JsonObject | None = None
    limit: Limit | None = None
    override_budget: bool = False


class ViewParams(RpcParams):
    session_id: SessionId | None = None
    include_working_context: bool = True
    include_episodic: bool = True
    include_semantic: bool = True
    include_conversation: bool = True
    include_raw_traces: bool = True
    include_archive: bool = True
    raw_trace_limit: Limit | None = None
    conversation_limit: Limit | None = None
    collapse_tools: bool = True


class SnapshotsParams(RpcParams):
    search: str | None = None
    page: int = 1
    page_size: int = 50
    # "folder": one entry per memory folder (session); "agent": one per agent (its latest).
    group: Literal["folder", "agent"] = "folder"


class ExportParams(RpcParams):
    session_id: SessionId
    name: Annotated[str, Field(min_length=1, max_length=128)] | None = None


class RestoreParams(RpcParams):
    data: Annotated[str, Field(min_length=1)]
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    force: bool = False


class ImportParams(RpcParams):
    files: dict[str, str]
    session_id: SessionId | None = None
    new_ids: bool = False


async def memory_get_strategy(ctx: CallContext, p: StrategyQuery) -> dict[str, Any]:
    """Every level of the strategy precedence and the effective result."""
    return await (await ctx.actor()).get_strategy(p.session_id)


async def memory_set_strategy(ctx: CallContext, p: SetStrategyParams) -> dict[str, Any]:
    """Persist a session's strategy (or the agent default without ``session_id``).

    Only the agent default may make a new agent: an agent without a store has no
    session, so a session's strategy there is -32001 and creates nothing."""
    ctx.creates_agent = ctx.creates_agent and p.session_id is None
    return await (await ctx.actor()).set_strategy(p.strategy, p.session_id)


async def memory_compact(ctx: CallContext, p: CompactParams) -> dict[str, Any]:
    """Compact now; ``compacted: false`` with a ``reason`` when there was nothing to do."""
    return await (await ctx.actor()).compact(
        p.session_id, strategy=p.strategy, system_instructions=p.system_instructions
    )


async def context_render(ctx: CallContext, p: RenderParams) -> dict[str, Any]:
    """The context rendered for one provider (``adapters.names()`` lists them)."""
    adapter = adapters.get(p.adapter)  # unknown names are refused before any read
    wc = await (await ctx.actor()).build_working_context(
        p.session_id,
        system_instructions=p.system_instructions,
        limit=p.limit,
        strategy=p.strategy,
        may_compact=ctx.may_write,
        override_budget=p.override_budget,
    )
    if len(wc.messages) + len(wc.system_instructions) > RENDER_ON_LOOP_ITEMS:
        payload = await _off_loop(
            ctx, lambda: adapter.to_model_messages(wc.system_instructions, wc.messages)
        )
    else:
        payload = adapter.to_model_messages(wc.system_instructions, wc.messages)
    return {
        "adapter": adapter.name,
        "payload": payload,
        "base_seq": wc.base_seq,
        "token_count": wc.token_count,
        "omitted_events": wc.omitted_events,
    }


async def memory_view(ctx: CallContext, p: ViewParams) -> dict[str, Any]:
    """The memory view of a session's mirror (the latest session when none is given)."""
    actor = await ctx.actor()
    await actor.mirror_settled()  # the files reflect every commit answered so far
    options = MemoryViewOptions(**p.model_dump(exclude={"session_id"}))
    view = await _off_loop(
        ctx,
        functools.partial(
            read_memory_view,
            ctx.registry.memory_dir,
            actor.agent_id,
            session_id=p.session_id,
            options=options,
            max_bytes=ctx.max_answer_bytes,
        ),
    )
    # Freed on a worker once answered: a view of many events is millions of objects.
    release_after_response(ctx.registry.executor, ctx.after_response, view)
    return view


async def memory_list_snapshots(ctx: CallContext, p: SnapshotsParams) -> dict[str, Any]:
    """A page of memory snapshot summaries, newest first; a restricted token sees its own.

    Read from the snapshot index (``mirror_io.snapshot_index``), not a scan of the
    folders; the filtering, sorting and paging of thousands of entries run on a worker
    too."""
    index = ctx.registry.snapshot_index
    memory_dir = ctx.registry.memory_dir
    await ctx.registry.drain_mirrors()  # as memory.view: every answered commit is listed

    def listing() -> dict[str, Any]:
        every = index.summaries() if index is not None else list_snapshot_summaries(memory_dir)
        summaries = [s for s in every if ctx.permits(s.agent_id)]
        if p.group == "agent":
            summaries = group_by_agent(summaries)
        return page_snapshots(summaries, p.search, p.page, p.page_size)

    return await _off_loop(ctx, listing)


async def export_session(ctx: CallContext, p: ExportParams) -> dict[str, Any]:
    """``{name, files: {file name: text}, trace_count}`` in the reference layout."""
    return await transfer.export_files(
        await ctx.actor(), p.session_id, name=p.name, max_bytes=ctx.max_answer_bytes
    )


async def import_session(ctx: CallContext, p: ImportParams) -> dict[str, Any]:
    """Import exported files (``{file name: text}``): losslessly, ids and seqs kept, when
    ``session_rows.jsonl`` is among them (``new_ids``: a copy under fresh ids)."""
    return await transfer.import_files(
        await ctx.actor(), p.files, session_id=p.session_id, new_ids=p.new_ids
    )


async def agent_backup(ctx: CallContext, p: NoParams) -> dict[str, Any]:
    """A consistent copy of the agent's SQLite file, taken while it keeps serving:
    ``{agent_id, file, bytes, sha256, sessions, events, schema_version, created_at, data}``
    with ``data`` the file in base64 (at most ``backups.RPC_MAX_BACKUP_BYTES``)."""
    actor = await ctx.actor()
    return await backups.backup_bytes(ctx.registry, actor.agent_id)


async def agent_restore(ctx: CallContext, p: RestoreParams) -> dict[str, Any]:
    """Replace the agent's file with a backup (``data`` base64, ``sha256`` of the file):
    refused unless the file matches the digest and is a usable agent database, and
    (when the agent exists) unless ``force``. Calls in flight finish first."""
    actor = await ctx.actor()
    return await backups.restore_bytes(
        ctx.registry, actor.agent_id, p.data, p.sha256, force=p.force
    )


async def adapters_list(ctx: CallContext, p: NoParams) -> dict[str, Any]:
    return {"adapters": adapters.names()}


async def metrics_get(ctx: CallContext, p: NoParams) -> dict[str, Any]:
    """Compaction counters (also served as Prometheus text on ``GET /metrics``). A token
    limited to some agents gets only ``open_agents`` and ``agents`` (its own open agents),
    nothing server-wide."""
    metrics = ctx.registry.metrics
    own = [a for a in ctx.registry.open_agents() if ctx.permits(a)]
    if ctx.grant is not None and not ctx.grant.unrestricted:
        return {"open_agents": len(own), "agents": own}
    return {
        "compactions": {s: metrics.compactions(s) for s in ("compact", "summarize")},
        "items_removed": metrics.items_removed(),
        "summary_problems": metrics.summary_problems(),
        "token_observations": [list(o) for o in metrics.token_observations()],
        "open_agents": ctx.registry.open_count,
        "agents": own,
        "skipped_records": SKIPPED_RECORDS.count,
    }
