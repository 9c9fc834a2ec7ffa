"""WebSocket JSON-RPC 2.0: framing (``protocol``, pure), the handlers (``methods``,
``memory_methods``) and the one method table (``table.BUILTIN_METHODS``).

The server (``session_server.server``) and client (``session_server.client``) are the I/O
shell around these. Importing this package loads no handler: the client needs only the
framing.
"""

from __future__ import annotations

__all__: list[str] = []
