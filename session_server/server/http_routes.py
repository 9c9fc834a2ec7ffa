"""Plain HTTP on the RPC port: the Memory Inspector page, ``/healthz`` and ``/metrics``.

``SessionServer`` hands every request that is not a WebSocket handshake to
``HttpRoutes.public`` first: the page
(``GET /``, ``GET /static/<file>``) and ``GET /healthz`` are answered without a token (the
page asks for one and sends it on its WebSocket; a probe needs none, and the health body
tells nothing secret). ``GET /metrics`` goes through the same token rule as the RPC
endpoints (``HttpRoutes.metrics``). Every other path is left to the WebSocket routes.

- ``/healthz``: 200 ``{"status": "ok", "version", "auth_required", "open_agents",
  "open_connections", "uptime_seconds"}`` (in cluster mode also ``"cluster": {node_id,
  connected, owned_agents, failovers, rebuilds, fenced_refusals}``) while serving with a
  writable memory dir; 503
  ``{"status": "shutting_down"}`` once a graceful stop began, 503 ``{"status":
  "unavailable", "reason"}`` when the memory dir cannot be written.
- The page's files are read once, from the installed package
  (``session_server/inspector/static``), and served with a strict Content-Security-Policy:
  scripts, styles and connections only from the page's own origin (no CDN, works offline).
"""

from __future__ import annotations

import http
import json
import os
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from websockets.asyncio.server import ServerConnection
from websockets.http11 import Request, Response

from .. import __version__
from ..process.ops_metrics import agent_view
from ..values.cluster_view import ClusterMember

if TYPE_CHECKING:
    from ..runtime.registry import ActorRegistry

__all__ = ["CONTENT_SECURITY_POLICY", "HttpRoutes", "memory_dir_writable"]

STATIC_PREFIX: Final = "/static/"
CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
_TYPES: Final = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".svg": "image/svg+xml",
}


def _load_static() -> dict[str, str]:
    """The page's files by name (text files, a few kB each)."""
    folder = resources.files("session_server.inspector").joinpath("static")
    return {
        entry.name: entry.read_text(encoding="utf-8")
        for entry in folder.iterdir()
        if entry.is_file() and Path(entry.name).suffix in _TYPES
    }


def memory_dir_writable(memory_dir: Path) -> bool:
    """True when ``memory_dir`` (or, before it exists, its nearest existing parent, where
    the first agent creates it) can be written by this process."""
    folder = memory_dir.resolve()
    while not folder.exists() and folder.parent != folder:
        folder = folder.parent
    return folder.is_dir() and os.access(folder, os.W_OK | os.X_OK)


class HttpRoutes:
    """Answers the plain HTTP paths of one server (see the module doc)."""

    def __init__(
        self,
        registry: ActorRegistry,
        *,
        auth_required: Callable[[], bool],
        stopping: Callable[[], bool],
        open_connections: Callable[[], int],
    ) -> None:
        self.registry = registry
        self.auth_required = auth_required
        self._stopping = stopping
        self._open_connections = open_connections
        self._started = time.monotonic()
        self._static = _load_static()

    def public(self, connection: ServerConnection, request: Request) -> Response | None:
        """The answer for a plain GET served without a token, or ``None``: not such a path,
        or a WebSocket handshake (left to the RPC routes, which refuse unknown paths)."""
        if request.headers.get("Upgrade", "").lower() == "websocket":
            return None
        path = urlsplit(request.path).path
        if path == "/healthz":
            return self.health(connection)
        if path in ("/", "/index.html"):
            return self._file(connection, "index.html")
        if path.startswith(STATIC_PREFIX):
            name = path[len(STATIC_PREFIX) :]
            if name in self._static and name != "index.html":
                return self._file(connection, name)
            return connection.respond(http.HTTPStatus.NOT_FOUND, "404 Not Found\n")
        return None

    def health(self, connection: ServerConnection) -> Response:
        body: dict[str, Any]
        if self._stopping():
            status, body = http.HTTPStatus.SERVICE_UNAVAILABLE, {"status": "shutting_down"}
        elif not memory_dir_writable(self.registry.memory_dir):
            status = http.HTTPStatus.SERVICE_UNAVAILABLE
            body = {"status": "unavailable", "reason": "the memory dir is not writable"}
        else:
            status = http.HTTPStatus.OK
            body = {
                "status": "ok",
                "version": __version__,
                "auth_required": self.auth_required(),
                "open_agents": self.registry.open_count,
                "open_connections": self._open_connections(),
                "uptime_seconds": round(time.monotonic() - self._started, 3),
            }
            member = self.registry.turn_logs
            if isinstance(member, ClusterMember):  # cluster mode: the node's part
                body["cluster"] = member.health()
        return _respond(
            connection,
            status,
            json.dumps(body) + "\n",
            {"Content-Type": "application/json", "Cache-Control": "no-store"},
        )

    def metrics(
        self, connection: ServerConnection, permits: Callable[[str], bool] | None = None
    ) -> Response:
        """Every metric of the registry in the Prometheus text format; with ``permits``
        (a token limited to some agents) only the per-agent series of the agents it
        allows, nothing server-wide."""
        source = self.registry.metrics.registry
        raw = generate_latest(source if permits is None else agent_view(source, permits))
        text = raw.decode()
        return _respond(connection, http.HTTPStatus.OK, text, {"Content-Type": CONTENT_TYPE_LATEST})

    def _file(self, connection: ServerConnection, name: str) -> Response:
        headers = {
            "Content-Type": _TYPES[Path(name).suffix],
            "Cache-Control": "no-cache",
            "Content-Security-Policy": CONTENT_SECURITY_POLICY,
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
            "X-Frame-Options": "DENY",
        }
        return _respond(connection, http.HTTPStatus.OK, self._static[name], headers)


def _respond(
    connection: ServerConnection, status: http.HTTPStatus, text: str, headers: dict[str, str]
) -> Response:
    """``connection.respond`` (Date, Content-Length, Connection: close) with ``headers``
    replacing its defaults (websockets' ``Headers`` appends on assignment)."""
    response = connection.respond(status, text)
    for name, value in headers.items():
        if name in response.headers:
            del response.headers[name]
        response.headers[name] = value
    return response
