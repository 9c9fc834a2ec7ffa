"""The front door (cluster mode): a client's connection to an agent another node owns is
forwarded to that owner, frame for frame (I/O shell; the rules are
``values.forwarding``).

``Forwarder`` (one per server) decides at the handshake, after the front door checked
the client's token, Origin and agent as for any connection: it asks the
``OwnerDirectory`` where the agent is served; ``None`` serves it here; otherwise it opens
an upstream WebSocket to the owner's agent endpoint with the client's token and the node
credential (``forward_credential``). An owner that cannot be reached, or that answers
421 (not the owner), is forgotten and the agent looked up again (a few times); an owner
that refuses the client (401, 403, 404, 503 ...) has its refusal passed on as it is. Only
when the upstream is open is the client's handshake accepted, so a client never sees a
connection that cannot reach its agent.

``ForwardedConnection`` then relays both ways: each client frame is sent upstream as it
came (text or binary, the ids untouched: the upstream is the client's own JSON-RPC
session at the owner, so answers, batches, errors and notifications come back exactly as
the owner sends them, in its order). Every bound the owner applies to a connection (the
in-flight window, unread answer bytes, subscriptions, frame size, idle time, token
expiry) applies to the forwarded one, which is a connection there; back-pressure crosses
the relay because each side reads only once the other took the previous message. The
front door keeps its intake rule (large-frame permits) on the client's side and a
``write_timeout`` on writes to the client.

When the client goes, the upstream is closed (the owner finishes or cancels what runs
as for any client that left). When the upstream goes first, ``after_upstream_end`` says
what to do: typically forget the owner and close the client with 1013 so that it
reconnects and its next handshake reaches the new owner.
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from ..concurrency.flow import Permits
from ..process.forward_metrics import ForwardMetrics
from ..process.log_redact import redacting_logger
from ..values.forwarding import (
    CLOSE_GOING_AWAY,
    FORWARD_HEADER,
    after_upstream_end,
    agent_url,
    forward_credential,
    not_owner_answer,
)
from ..values.ownership import OwnerDirectory
from .intake import IntakeConnection

__all__ = ["MAX_LOCATES", "ForwardedConnection", "Forwarder", "OwnerRefusal", "unlocated"]

log = logging.getLogger("session_server.server")

MAX_LOCATES: Final = 3
"""Owners tried for one handshake (each failure forgets the owner and asks again)."""

UPSTREAM_PING_INTERVAL: Final = 5.0
UPSTREAM_PING_TIMEOUT: Final = 5.0
"""Keepalive of an upstream: an owner that stops answering (frozen, or a network cut
with no reset) is found gone within about 10 s, then forgotten (websockets' default,
20 s + 20 s, would hold the client that long)."""

MISDIRECTED: Final = http.HTTPStatus.MISDIRECTED_REQUEST
"""The owner's answer to a forwarded handshake for an agent it does not own (421)."""


@dataclass(frozen=True, slots=True)
class OwnerRefusal:
    """The HTTP answer the client gets instead of a forwarded connection."""

    status: int
    body: str
    retry_after: str | None = None
    www_authenticate: str | None = None


class Forwarder:
    """Opens upstream connections to agents' owners (module doc)."""

    def __init__(
        self,
        directory: OwnerDirectory,
        secret: bytes,
        metrics: ForwardMetrics,
        *,
        max_size: int,
        open_timeout: float | None,
    ) -> None:
        self.directory = directory
        self.secret = secret
        self.metrics = metrics
        self.max_size = max_size
        self.open_timeout = open_timeout

    async def open_upstream(
        self, agent_id: str, token: str | None
    ) -> ClientConnection | OwnerRefusal | None:
        """The upstream to ``agent_id``'s owner; ``None``: serve the agent here; an
        ``OwnerRefusal``: answer the client's handshake with it."""
        headers = {FORWARD_HEADER: forward_credential(self.secret, agent_id)}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        last = "no owner found"
        for _attempt in range(MAX_LOCATES):
            try:
                location = await self.directory.locate(agent_id)
            except Exception as exc:  # the cluster's directory failed: the client retries
                return unlocated(exc)
            if location is None:
                return None
            try:
                upstream = await connect(
                    agent_url(location.url, agent_id),
                    additional_headers=headers,
                    max_size=self.max_size,
                    max_queue=4,
                    compression=None,
                    open_timeout=self.open_timeout,
                    ping_interval=UPSTREAM_PING_INTERVAL,
                    ping_timeout=UPSTREAM_PING_TIMEOUT,
                    logger=redacting_logger("websockets.client"),
                )
            except InvalidStatus as exc:
                response = exc.response
                if response.status_code != MISDIRECTED:
                    return OwnerRefusal(
                        response.status_code,
                        response.body.decode("utf-8", "replace") if response.body else "",
                        response.headers.get("Retry-After"),
                        response.headers.get("WWW-Authenticate"),
                    )
                self.metrics.failures["not_owner"].inc()
                last = f"node {location.node_id} is not the owner"
            except (OSError, TimeoutError, EOFError, InvalidHandshake, ConnectionClosed) as exc:
                self.metrics.failures["unreachable"].inc()
                last = f"node {location.node_id} cannot be reached ({type(exc).__name__})"
            else:
                self.metrics.connections.inc()
                return upstream
            self.relocate(agent_id)
        return OwnerRefusal(
            http.HTTPStatus.SERVICE_UNAVAILABLE,
            f"503 Service Unavailable: the owner of this agent cannot be reached ({last}); "
            "retry later\n",
            retry_after="1",
        )

    def relocate(self, agent_id: str) -> None:
        """Forget ``agent_id``'s owner: the next ``locate`` looks again."""
        self.metrics.relocations.inc()
        try:
            self.directory.forget(agent_id)
        except Exception:
            log.exception("the owner directory failed to forget an agent's owner")


def unlocated(exc: Exception) -> OwnerRefusal:
    """The answer to a handshake whose agent the directory could not locate (503)."""
    log.warning("the owner directory failed to locate an agent: %r", exc)
    return OwnerRefusal(
        http.HTTPStatus.SERVICE_UNAVAILABLE,
        "503 Service Unavailable: the owner of this agent cannot be located now; retry later\n",
        retry_after="1",
    )


class ForwardedConnection:
    """One client connection relayed to its agent's owner (module doc)."""

    def __init__(
        self,
        client: IntakeConnection,
        upstream: ClientConnection,
        agent_id: str,
        forwarder: Forwarder,
        *,
        permits: Permits,
        write_timeout: float | None,
        remaining_stop_time: Callable[[], float | None],
    ) -> None:
        self.client = client
        self.upstream = upstream
        self.agent_id = agent_id
        self.forwarder = forwarder
        self.permits = permits
        self.write_timeout = write_timeout
        self.remaining_stop_time = remaining_stop_time
        self.not_owner = False
        self.upstream_lost = False
        self.stopping = False
        self.reader: asyncio.Task[None] | None = None

    async def run(self) -> None:
        """Relay until either side ends; then end the other as the module doc says."""
        self.reader = asyncio.create_task(self._client_to_owner())
        writer = asyncio.create_task(self._owner_to_client())
        if self.stopping:
            self.reader.cancel()
        try:
            await asyncio.wait({self.reader, writer}, return_when=asyncio.FIRST_COMPLETED)
            if self.upstream_lost and not writer.done():
                await writer  # ends with the upstream's close
        finally:
            if writer.done():
                await self._upstream_ended()
            else:
                writer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await writer
                await self._client_ended()

    async def _client_ended(self) -> None:
        """The client left (or the server stops): close the upstream."""
        if self.reader is not None and not self.reader.done():
            self.reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            if self.reader is not None:
                await self.reader
        with contextlib.suppress(Exception):
            async with asyncio.timeout(self.remaining_stop_time() or 10.0):
                await self.upstream.close()
        if self.stopping:
            await self._close_client(CLOSE_GOING_AWAY, "server shutting down")

    async def _upstream_ended(self) -> None:
        """The owner's side ended first: forget the owner when it is gone, close the
        client with the code ``after_upstream_end`` gives."""
        if self.reader is not None:
            self.reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.reader
        rcvd = self.upstream.protocol.close_rcvd
        code = rcvd.code if rcvd is not None else None
        end = after_upstream_end(code, rcvd.reason if rcvd is not None else "", self.not_owner)
        if end.forget:
            if not self.not_owner:
                self.forwarder.metrics.failures["dropped"].inc()
            self.forwarder.relocate(self.agent_id)
        with contextlib.suppress(Exception):
            await self.upstream.close()
        await self._close_client(end.code, end.reason)

    async def _close_client(self, code: int, reason: str) -> None:
        try:
            async with asyncio.timeout(self.remaining_stop_time() or 10.0):
                await self.client.close(code, reason)
        except TimeoutError:
            self.client.transport.abort()

    async def _client_to_owner(self) -> None:
        """Each client frame, under the intake rule, sent upstream as it came."""
        client = self.client
        calls = self.forwarder.metrics.calls
        try:
            while True:
                client.ready(True)
                try:
                    data = await client.recv(decode=False)
                    small = client.claim_small(len(data))
                    if small is None:
                        text, permit = await client.claim(len(data))
                    else:
                        text, permit = small, False
                finally:
                    client.ready(False)
                try:
                    await self.upstream.send(data, text=text)
                except ConnectionClosed:
                    self.upstream_lost = True
                    return
                finally:
                    if permit:
                        self.permits.release()
                del data
                calls.inc()
        except ConnectionClosed:
            pass
        finally:
            client.end()

    async def _owner_to_client(self) -> None:
        """Each message of the owner (answers and notifications, in its order) written
        to the client; stops after an answer that says the owner is no longer it."""
        upstream = self.upstream
        client = self.client
        try:
            while True:
                data = await upstream.recv(decode=False)
                not_owner = not_owner_answer(data)
                try:
                    async with asyncio.timeout(self.write_timeout):
                        await client.send(data, text=True)
                except TimeoutError:
                    log.warning(
                        "dropping a forwarded connection whose socket took no %d-byte "
                        "message in %s s (the client does not read its answers)",
                        len(data),
                        self.write_timeout,
                    )
                    client.transport.abort()
                    return
                if not_owner:
                    self.not_owner = True
                    return
        except ConnectionClosed:
            return

    def stop(self) -> None:
        """The server stops: read no more from the client, close both sides."""
        self.stopping = True
        if self.reader is not None:
            self.reader.cancel()

    def abort(self) -> None:
        self.client.transport.abort()
        self.upstream.transport.abort()
