"""WebSocket JSON-RPC 2.0: framing (``protocol``, pure) and the method table (``methods``).

The server (``session_server.server``) and client (``session_server.client``) are the I/O
shell around these.
"""

from __future__ import annotations

from . import memory_methods as memory_methods
from .methods import METHODS, CallContext, MethodSpec, RpcParams, dispatch, rpc_method
from .protocol import Frame, Invalid, Request, parse_frame

__all__ = [
    "METHODS",
    "CallContext",
    "Frame",
    "Invalid",
    "MethodSpec",
    "Request",
    "RpcParams",
    "dispatch",
    "parse_frame",
    "rpc_method",
]
