"""The WebSocket handshake's glue: routes, HTTP refusals, the subprotocol answer.

``SessionServer._process_request`` decides; these build its answers: ``refuse`` (status
and a one-line reason), ``unauthorized`` (401 with ``WWW-Authenticate``),
``refuse_oversized`` (a header line over websockets' limit), and ``select_subprotocol``.
A ``Route`` is what a handshake that succeeds resolved to: the endpoint, the agent and
the token's grant.
"""

from __future__ import annotations

import http
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.http11 import MAX_LINE_LENGTH, Response
from websockets.typing import Subprotocol

from ..auth.tokens import BEARER_SUBPROTOCOL_PREFIX, Grant
from ..rpc.method_spec import Endpoint

__all__ = [
    "AGENT_PREFIX",
    "JSONRPC_SUBPROTOCOL",
    "Route",
    "offered_subprotocols",
    "refuse",
    "refuse_oversized",
    "select_subprotocol",
    "unauthorized",
]

JSONRPC_SUBPROTOCOL: Final = "jsonrpc"
AGENT_PREFIX: Final = "/v1/agents/"


@dataclass(frozen=True, slots=True)
class Route:
    """Where a handshake that succeeded leads (kept until its handler starts)."""

    endpoint: Endpoint
    agent_id: str | None
    grant: Grant | None


def refuse(connection: ServerConnection, status: http.HTTPStatus, text: str) -> Response:
    return connection.respond(status, f"{status.value} {status.phrase}: {text}\n")


def refuse_oversized(connection: ServerConnection, header: str) -> Response:
    """The answer to a request with a header line over websockets' line limit."""
    if header == "authorization":
        return unauthorized(
            connection, f"token too long (the Authorization header is over {MAX_LINE_LENGTH} bytes)"
        )
    return refuse(
        connection,
        http.HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
        f"header {header!r} is over {MAX_LINE_LENGTH} bytes",
    )


def unauthorized(connection: ServerConnection, reason: str) -> Response:
    response = refuse(connection, http.HTTPStatus.UNAUTHORIZED, reason)
    response.headers["WWW-Authenticate"] = 'Bearer realm="session-server", error="invalid_token"'
    return response


def offered_subprotocols(headers: Headers) -> list[str]:
    return [
        p.strip()
        for value in headers.get_all("Sec-WebSocket-Protocol")
        for p in value.split(",")
        if p.strip()
    ]


def select_subprotocol(
    connection: ServerConnection, offered: Sequence[Subprotocol]
) -> Subprotocol | None:
    """Answer ``jsonrpc`` when offered; otherwise echo a ``bearer.*`` entry (browsers fail
    a handshake whose answer names no offered subprotocol); otherwise none."""
    if JSONRPC_SUBPROTOCOL in offered:
        return Subprotocol(JSONRPC_SUBPROTOCOL)
    for proto in offered:
        if proto.startswith(BEARER_SUBPROTOCOL_PREFIX):
            return proto
    return None
