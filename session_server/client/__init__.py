"""Async Python client of the WebSocket JSON-RPC server.

::

    async with SessionClient("ws://127.0.0.1:8765", "my-agent", token="...") as client:
        sid = await client.create_session()
        await client.persist_turn(sid, [ContextMessage(role="user", content="hi")])
        ctx = await client.build_context(sid)

One client is one connection to ``/v1/agents/<quoted agent_id>`` (or ``/v1`` when
``agent_id`` is ``None``, for ``list_agents``). Calls may run concurrently (pipelined on the
connection). JSON-RPC errors are raised as the project's exceptions (``NotFoundError``,
``ConflictError`` with ``data["last_seq"]``, ...), message and data preserved. Writes
(``append_events``, ``persist_turn``) carry an idempotency key, a fresh time-ordered UUID
unless the caller passes one, so retrying a call with the same key never writes twice.

The client reconnects on its own (``connection``): at the first ``connect()`` and
whenever the connection drops it retries with exponential backoff and jitter for at most
``reconnect_budget`` seconds (default 30; ``retry_delay``, ``max_retry_delay`` shape the
waits), then raises ``ServerUnavailable``. Calls lost in flight are sent again on the new
connection when that is safe (``replay``: reads, keyed writes, replacing writes); the
others raise ``OutcomeUnknownError`` (may or may not have been applied). Subscriptions
resume after the last seq they received.

There is one method per RPC method (``tests/session_server/client/test_client_methods.py`` checks
the table): sessions (``create_session`` with ``if_exists``, ``get_or_create_session``,
``get_session``, ``list_sessions``/``session_page``/``iter_sessions`` with paging and a
metadata filter, ``update_session``, ``clear_session``, ``delete_session``), events
(``append_events``, ``load_events``, ``delete_events``, ``pop_event``), contexts
(``build_context``, ``render_context``, ``persist_turn``, ``persist_context``), memory
(``get_strategy``, ``set_strategy``, ``compact``, ``memory_view``, ``export_session``,
``import_session``), ``subscribe``, and on the server endpoint ``list_agents``,
``list_snapshots``, ``list_adapters``, ``get_metrics``.

Helpers built on it: :class:`session_server.client.sync_client.SyncSessionClient` (blocking
calls for scripts and ``Runner.run_sync``, reconnecting on its own) and
:func:`session_server.client.follow.follow` (a session's events across reconnects, no gap, no
duplicate). Importing this module imports neither the store nor the server.

The package: ``connection`` (the WebSocket JSON-RPC connection: handshake, requests,
routing of answers and notifications), ``session_client`` (``SessionClient``: the method
wrappers), ``subscription``, ``errors``, ``backoff`` (the reconnection schedule) and
``replay`` (which calls may be sent again).
"""

from __future__ import annotations

from .backoff import Backoff
from .errors import (
    ERROR_CLASSES,
    ConnectionLostError,
    OutcomeUnknownError,
    ServerUnavailable,
    error_from,
)
from .session_client import SessionClient, SessionPage
from .subscription import Subscription

__all__ = [
    "ERROR_CLASSES",
    "Backoff",
    "ConnectionLostError",
    "OutcomeUnknownError",
    "ServerUnavailable",
    "SessionClient",
    "SessionPage",
    "Subscription",
    "error_from",
]
