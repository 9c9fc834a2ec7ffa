"""Which calls a client may send again after its connection was lost (pure).

A request whose connection drops before its answer may or may not have run on the
server. Sending it again on a new connection is safe only when running it twice leaves
the same state and gives the caller the same answer as running it once:

- the reads (every method of scope ``read`` in ``session_server.rpc.table``, and the
  admin reads ``agent.backup``, ``agents.list``, ``memory.list_snapshots``,
  ``metrics.get``);
- writes whose second run is recognised by the server: ``events.append`` and
  ``turn.persist`` carrying an ``idempotency_key`` (the server answers a repeated key with
  the first call's result, writing nothing; ``SessionClient`` gives every such write a
  key), and ``session.create`` with ``if_exists: "return"`` and a ``session_id``;
- writes that replace a value with the same value: ``session.update``,
  ``memory.set_strategy``, ``memory.set_budget``, ``retention.set``;
- ``stream.append`` with ``after_cursor`` (the server skips the chunks it already has).

Everything else is not sent again (``OutcomeUnknownError``): ``session.create`` without
``if_exists: "return"`` (a second run creates another session or answers a conflict),
``session.delete``, ``session.clear``, ``events.delete``, ``events.pop`` (a second run
removes the next event, or answers a conflict for the one the first run removed),
``memory.compact``, ``import.session``, ``agent.restore``, and any method this table does
not know. ``tests/session_server/client/test_replay.py`` checks that every method of the
server's table is classified here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

__all__ = ["KEYED_WRITES", "NOT_REPLAYED", "REPLAYED", "replay_safe"]

REPLAYED: Final = frozenset(
    {
        # reads
        "session.get",
        "session.list",
        "events.load",
        "context.build",
        "context.render",
        "memory.get_strategy",
        "memory.view",
        "export.session",
        "events.subscribe",
        "events.unsubscribe",
        "session.branches",
        "adapters.list",
        "memory.search",
        "memory.expand",
        "memory.tools",
        "memory.usage",
        "memory.usage_chart",
        "memory.get_budget",
        "retention.get",
        "retention.preview",
        "memory.blocks.get",
        "memory.blocks.list",
        "memory.blocks.history",
        "cluster.status",
        "cluster.owner",  # claims an unowned agent: a second run names the same owner
        # admin reads
        "agent.backup",
        "agents.list",
        "memory.list_snapshots",
        "metrics.get",
        # replacing a value with the same value
        "session.update",
        "memory.set_strategy",
        "memory.set_budget",
        "retention.set",
    }
)
"""Methods that are always safe to send again."""

KEYED_WRITES: Final = frozenset({"events.append", "turn.persist"})
"""Writes that are safe to send again when they carry an ``idempotency_key``."""

NOT_REPLAYED: Final = frozenset(
    {
        "session.create",  # unless if_exists is "return" and session_id is given
        "session.delete",
        "session.clear",
        "events.delete",
        "events.pop",
        "session.fork",
        "session.rewind",
        "memory.compact",
        "import.session",
        "agent.restore",
        "stream.open",  # a second run takes the stream over (a higher generation)
        "stream.close",  # ``client.live.StreamWriter`` retries it itself
        "stream.append",  # unless it carries after_cursor
        "memory.tool_call",  # a model tool may write (memory blocks)
        "memory.reindex",
        "memory.blocks.set",  # a second run writes another revision (or a conflict)
        "memory.blocks.revert",
        "memory.blocks.delete",  # a second run answers deleted: false
    }
)
"""Methods whose second run differs from the first: a lost call is reported, not resent."""


def replay_safe(method: str, params: Mapping[str, Any] | None) -> bool:
    """Whether the request ``method`` with ``params`` may be sent again after its
    connection was lost once it was sent (it may have run)."""
    params = params or {}
    if method in REPLAYED:
        return True
    if method in KEYED_WRITES:
        return bool(params.get("idempotency_key"))
    if method == "stream.append":  # chunks already stored are skipped
        return params.get("after_cursor") is not None
    if method == "session.create":
        return params.get("if_exists") == "return" and bool(params.get("session_id"))
    return False
