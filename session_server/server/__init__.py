"""The WebSocket server: accepting, the handshake, one connection's pump, intake
bounds, fan-out, answers and the HTTP routes (I/O shell).

``SessionServer`` and ``lock_memory_dir`` are importable from here.
"""

from __future__ import annotations

from .server import SessionServer, lock_memory_dir

__all__ = ["SessionServer", "lock_memory_dir"]
