"""The one table of RPC methods the server answers (``SessionServer(methods=...)``).

Every method is a row here: its name, params model, handler, endpoint and the token scope
it needs (docs/reference.md "Method scopes" lists the same). Only the rows marked
``creates_agent`` (session.create, memory.set_strategy, import.session, agent.restore,
memory.blocks.set) may
make a new agent: ``events.append`` and ``turn.persist`` need a session, so an agent that
has none cannot be their target. Nothing is
registered by importing a module; a server given another table (tests, embedders)
answers exactly that table's methods.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from . import block_methods as blocks
from . import branch_methods as branch
from . import cluster_methods as cluster
from . import memory_methods as memory
from . import methods as session
from . import recall_methods as recall
from . import session_methods as edits
from . import stream_methods as streams
from . import usage_methods as usage
from .method_spec import SERVER, MethodSpec, method_table
from .params import (
    AgentsListParams,
    AppendParams,
    BuildParams,
    CreateSessionParams,
    DeleteEventsParams,
    LoadParams,
    NoParams,
    PersistParams,
    SessionParams,
    SubscribeParams,
)

__all__ = ["BUILTIN_METHODS", "ROWS"]

ROWS: Final[tuple[MethodSpec, ...]] = (
    # Sessions and events (``methods``).
    MethodSpec(
        "session.create",
        CreateSessionParams,
        session.session_create,
        scope="write",
        creates_agent=True,
    ),
    MethodSpec("session.get", SessionParams, session.session_get, scope="read"),
    MethodSpec(
        "session.list", edits.ListParams, edits.session_list, scope="read", sessions="filter"
    ),
    MethodSpec("session.update", edits.UpdateParams, edits.session_update, scope="write"),
    MethodSpec("session.clear", edits.ClearParams, edits.session_clear, scope="admin"),
    MethodSpec("events.pop", edits.PopParams, edits.events_pop, scope="admin"),
    MethodSpec("session.delete", SessionParams, session.session_delete, scope="admin"),
    MethodSpec("events.append", AppendParams, session.events_append, scope="write"),
    MethodSpec("events.load", LoadParams, session.events_load, scope="read"),
    MethodSpec("events.delete", DeleteEventsParams, session.events_delete, scope="admin"),
    MethodSpec("context.build", BuildParams, session.context_build, scope="read"),
    MethodSpec("turn.persist", PersistParams, session.turn_persist, scope="write"),
    MethodSpec("events.subscribe", SubscribeParams, session.events_subscribe, scope="read"),
    MethodSpec("events.unsubscribe", SessionParams, session.events_unsubscribe, scope="read"),
    # Live turns (``stream_methods``).
    MethodSpec("stream.open", streams.StreamOpenParams, streams.stream_open, scope="write"),
    # A stream names no session: the handlers check the stream's session ("filter").
    MethodSpec(
        "stream.append",
        streams.StreamAppendParams,
        streams.stream_append,
        scope="write",
        sessions="filter",
    ),
    MethodSpec(
        "stream.close",
        streams.StreamCloseParams,
        streams.stream_close,
        scope="write",
        sessions="filter",
    ),
    MethodSpec("agents.list", AgentsListParams, session.agents_list, SERVER, scope="admin"),
    # Branches (``branch_methods``): forking needs ``write`` on the source session.
    MethodSpec("session.fork", branch.ForkParams, branch.session_fork, scope="write"),
    MethodSpec("session.rewind", branch.RewindParams, branch.session_rewind, scope="write"),
    MethodSpec("session.branches", branch.BranchesParams, branch.session_branches, scope="read"),
    # Compaction, rendering, views, export and import, server facts (``memory_methods``).
    MethodSpec(
        "memory.get_strategy", memory.StrategyQuery, memory.memory_get_strategy, scope="read"
    ),
    MethodSpec(
        "memory.set_strategy",
        memory.SetStrategyParams,
        memory.memory_set_strategy,
        scope="write",
        creates_agent=True,  # the agent default (no session_id) is an agent's first write
    ),
    MethodSpec("memory.compact", memory.CompactParams, memory.memory_compact, scope="write"),
    MethodSpec("context.render", memory.RenderParams, memory.context_render, scope="read"),
    # Usage, budgets and retention (``usage_methods``).
    MethodSpec("memory.usage", usage.UsageParams, usage.memory_usage, scope="read"),
    MethodSpec("memory.usage_chart", usage.ChartParams, usage.memory_usage_chart, scope="read"),
    MethodSpec("memory.set_budget", usage.BudgetParams, usage.memory_set_budget, scope="write"),
    MethodSpec("memory.get_budget", usage.NoBudgetParams, usage.memory_get_budget, scope="read"),
    MethodSpec("retention.set", usage.RetentionSetParams, usage.retention_set, scope="admin"),
    MethodSpec("retention.get", usage.RetentionGetParams, usage.retention_get, scope="read"),
    MethodSpec(
        "retention.preview",
        usage.RetentionPreviewParams,
        usage.retention_preview,
        scope="read",
    ),
    MethodSpec("memory.view", memory.ViewParams, memory.memory_view, scope="read"),
    MethodSpec(
        "memory.list_snapshots",
        memory.SnapshotsParams,
        memory.memory_list_snapshots,
        SERVER,
        scope="admin",
    ),
    MethodSpec("export.session", memory.ExportParams, memory.export_session, scope="read"),
    MethodSpec(
        "import.session",
        memory.ImportParams,
        memory.import_session,
        scope="admin",
        creates_agent=True,
    ),
    MethodSpec("agent.backup", NoParams, memory.agent_backup, scope="admin"),
    MethodSpec(
        "agent.restore",
        memory.RestoreParams,
        memory.agent_restore,
        scope="admin",
        creates_agent=True,
    ),
    MethodSpec(
        "adapters.list",
        NoParams,
        memory.adapters_list,
        SERVER,
        scope="read",
        sessions="none",
    ),
    MethodSpec("metrics.get", NoParams, memory.metrics_get, SERVER, scope="admin"),
    # Memory blocks (``block_methods``): agent-scope writes need admin or the blocks claim.
    MethodSpec(
        "memory.blocks.set",
        blocks.BlockSetParams,
        blocks.blocks_set,
        scope="write",
        creates_agent=True,  # an agent's blocks may come before its first session
    ),
    MethodSpec("memory.blocks.get", blocks.BlockParams, blocks.blocks_get, scope="read"),
    MethodSpec("memory.blocks.list", blocks.BlocksListParams, blocks.blocks_list, scope="read"),
    MethodSpec(
        "memory.blocks.history", blocks.BlockHistoryParams, blocks.blocks_history, scope="read"
    ),
    MethodSpec(
        "memory.blocks.revert", blocks.BlockRevertParams, blocks.blocks_revert, scope="write"
    ),
    MethodSpec(
        "memory.blocks.delete", blocks.BlockDeleteParams, blocks.blocks_delete, scope="write"
    ),
    # Recall (``recall_methods``).
    MethodSpec(
        "memory.search", recall.SearchParams, recall.memory_search, scope="read", sessions="filter"
    ),
    MethodSpec("memory.expand", recall.ExpandParams, recall.memory_expand, scope="read"),
    MethodSpec(
        "memory.tools", recall.ToolsParams, recall.memory_tools, scope="read", sessions="none"
    ),
    # write: a model tool may edit memory (the memory-block tools); the recall tools read.
    MethodSpec("memory.tool_call", recall.ToolCallParams, recall.memory_tool_call, scope="write"),
    MethodSpec("memory.reindex", recall.ReindexParams, recall.memory_reindex, scope="admin"),
    # Cluster mode (``cluster_methods``; docs/cluster.md).
    MethodSpec(
        "cluster.status", NoParams, cluster.cluster_status, SERVER, scope="read", sessions="none"
    ),
    MethodSpec(
        "cluster.owner",
        cluster.ClusterOwnerParams,
        cluster.cluster_owner,
        SERVER,
        scope="read",
        sessions="none",
    ),
)

BUILTIN_METHODS: Final[Mapping[str, MethodSpec]] = MappingProxyType(method_table(ROWS))
