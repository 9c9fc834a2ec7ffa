"""The one table of RPC methods the server answers (``SessionServer(methods=...)``).

Every method is a row here: its name, params model, handler and endpoint. Nothing is
registered by importing a module; a server given another table (tests, embedders)
answers exactly that table's methods.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from . import memory_methods as memory
from . import methods as session
from .methods import SERVER, MethodSpec, method_table

__all__ = ["BUILTIN_METHODS", "ROWS"]

ROWS: Final[tuple[MethodSpec, ...]] = (
    # Sessions and events (``methods``).
    MethodSpec("session.create", session.CreateSessionParams, session.session_create),
    MethodSpec("session.get", session.SessionParams, session.session_get),
    MethodSpec("session.list", session.NoParams, session.session_list),
    MethodSpec("session.delete", session.SessionParams, session.session_delete),
    MethodSpec("events.append", session.AppendParams, session.events_append),
    MethodSpec("events.load", session.LoadParams, session.events_load),
    MethodSpec("events.delete", session.DeleteEventsParams, session.events_delete),
    MethodSpec("context.build", session.BuildParams, session.context_build),
    MethodSpec("turn.persist", session.PersistParams, session.turn_persist),
    MethodSpec("events.subscribe", session.SessionParams, session.events_subscribe),
    MethodSpec("events.unsubscribe", session.SessionParams, session.events_unsubscribe),
    MethodSpec("agents.list", session.NoParams, session.agents_list, SERVER),
    # Compaction, rendering, views, export and import, server facts (``memory_methods``).
    MethodSpec("memory.get_strategy", memory.StrategyQuery, memory.memory_get_strategy),
    MethodSpec("memory.set_strategy", memory.SetStrategyParams, memory.memory_set_strategy),
    MethodSpec("memory.compact", memory.CompactParams, memory.memory_compact),
    MethodSpec("context.render", memory.RenderParams, memory.context_render),
    MethodSpec("memory.view", memory.ViewParams, memory.memory_view),
    MethodSpec(
        "memory.list_snapshots", memory.SnapshotsParams, memory.memory_list_snapshots, SERVER
    ),
    MethodSpec("export.session", memory.ExportParams, memory.export_session),
    MethodSpec("import.session", memory.ImportParams, memory.import_session),
    MethodSpec("adapters.list", session.NoParams, memory.adapters_list, SERVER),
    MethodSpec("metrics.get", session.NoParams, memory.metrics_get, SERVER),
)

BUILTIN_METHODS: Final[Mapping[str, MethodSpec]] = MappingProxyType(method_table(ROWS))
