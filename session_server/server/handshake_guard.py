"""The front door before ``websockets`` parses a request: answers for what it would drop,
and the bound on handshakes in progress.

Every request head gets an HTTP answer, never a silently closed connection (``websockets``
closes without an answer on most malformed requests): ``HeadFilter`` checks the request
line and the header lines as they arrive and ``GuardedConnection`` answers itself, without
handing anything to ``websockets``, 400 (not HTTP/1.1, a malformed line, a request body),
405 (a method other than GET, with ``Allow: GET``), 414 (a request line over the limit)
or 431 (more than ``MAX_NUM_HEADERS`` header lines).

``websockets`` refuses any request line longer than ``websockets.http11.MAX_LINE_LENGTH``
(8 KiB) by closing the connection without an answer (and logging a traceback). A token
can be that long (a signed token listing many agent patterns), and its presenter deserves
a 401 that says why. ``GuardedConnection`` (passed to ``serve(create_connection=...)``,
or ``guarded(cls)`` to put it in front of another ``ServerConnection`` class) runs the bytes of the request head through ``HeadFilter`` before ``websockets`` parses
them: a header line over the limit is dropped and its name recorded in
``oversized_header``; the server's ``process_request`` then answers 401 (``token too
long``) for ``Authorization`` and 431 for any other header. An over-long request line
(the path) is answered 414. Everything after the head passes untouched.

``HandshakeGate`` (pure bookkeeping) counts connections from TCP accept until the server's
``process_request`` has decided (handshakes in progress, bounded by ``max_handshakes``,
apart from ``max_connections``) and the connections the server admitted (bounded by
``max_connections``). When a new connection finds ``max_handshakes`` in progress, the
oldest one is dropped: a client that opens connections and sends nothing (or sends its
head slowly) cannot keep a client that completes its handshake in milliseconds out, and
each such connection lasts at most the handshake deadline (``open_timeout``).
"""

from __future__ import annotations

import asyncio
import email.utils
import http
import logging
import re
from collections.abc import Callable
from typing import Any, ClassVar, Final, Generic, TypeVar

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import InvalidMessage
from websockets.http11 import MAX_LINE_LENGTH, MAX_NUM_HEADERS

__all__ = [
    "GuardedConnection",
    "HandshakeGate",
    "HeadFilter",
    "HeadRefusal",
    "QuietClientHandshakeFailures",
    "guarded",
    "quiet_client_handshake_failures",
    "refusal_bytes",
]

K = TypeVar("K")

# RFC 9110 token characters (a method, a header name).
_TOKEN: Final = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# A request target: printable ASCII without spaces.
_TARGET: Final = re.compile(rb"[\x21-\x7e]+")
# A header value: visible ASCII, spaces, tabs, obs-text (bytes 0x80-0xff).
_VALUE: Final = re.compile(rb"[\t\x20-\x7e\x80-\xff]*")


class HeadRefusal:
    """An answer to a request head that ``websockets`` would drop without one."""

    __slots__ = ("reason", "status")

    def __init__(self, status: http.HTTPStatus, reason: str) -> None:
        self.status = status
        self.reason = reason

    def __repr__(self) -> str:
        return f"HeadRefusal({self.status.value}, {self.reason!r})"


def refusal_bytes(refusal: HeadRefusal) -> bytes:
    """The whole HTTP/1.1 answer for ``refusal`` (it closes the connection)."""
    status = refusal.status
    body = f"{status.value} {status.phrase}: {refusal.reason}\n".encode()
    lines = [
        f"HTTP/1.1 {status.value} {status.phrase}",
        f"Date: {email.utils.formatdate(usegmt=True)}",
        "Connection: close",
        "Content-Type: text/plain; charset=utf-8",
        f"Content-Length: {len(body)}",
    ]
    if status is http.HTTPStatus.METHOD_NOT_ALLOWED:
        lines.append("Allow: GET")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _request_line_refusal(line: bytes) -> HeadRefusal | None:
    parts = line.rstrip(b"\r\n").split(b" ")
    if len(parts) != 3 or not _TOKEN.fullmatch(parts[0]) or not _TARGET.fullmatch(parts[1]):
        return HeadRefusal(http.HTTPStatus.BAD_REQUEST, "malformed request line")
    method, _target, version = parts
    if not version.startswith(b"HTTP/"):
        return HeadRefusal(http.HTTPStatus.BAD_REQUEST, "malformed request line")
    if version != b"HTTP/1.1":
        return HeadRefusal(http.HTTPStatus.BAD_REQUEST, "this server speaks HTTP/1.1 only")
    if method != b"GET":
        shown = method.decode("ascii")[:32]
        return HeadRefusal(
            http.HTTPStatus.METHOD_NOT_ALLOWED, f"method {shown} is not allowed; use GET"
        )
    return None


def _header_line_refusal(line: bytes) -> HeadRefusal | None:
    name, colon, value = line.rstrip(b"\r\n").partition(b":")
    if not colon or not _TOKEN.fullmatch(name) or not _VALUE.fullmatch(value):
        return HeadRefusal(http.HTTPStatus.BAD_REQUEST, "malformed header line")
    lower = name.lower()
    if lower == b"transfer-encoding" or (lower == b"content-length" and value.strip() != b"0"):
        return HeadRefusal(
            http.HTTPStatus.BAD_REQUEST, "a request body is not accepted (GET requests only)"
        )
    return None


class HeadFilter:
    """A state machine over the bytes of one HTTP request head (no I/O).

    ``feed(data)`` returns the bytes to hand on: the head with over-long header lines
    removed, then everything after the head unchanged. ``oversized`` is the lower-case
    name of the first header removed (``None`` when none was). A line being read is held
    back until it ends, at most ``limit`` bytes of it. ``refusal`` is set (and nothing
    more is handed on) when the head must be answered here (see the module doc).
    """

    __slots__ = (
        "done",
        "first",
        "headers",
        "limit",
        "line",
        "max_headers",
        "oversized",
        "refusal",
        "skipping",
    )

    def __init__(self, limit: int = MAX_LINE_LENGTH, max_headers: int = MAX_NUM_HEADERS) -> None:
        self.limit = limit
        self.max_headers = max_headers
        self.headers = 0
        self.refusal: HeadRefusal | None = None
        self.line = bytearray()
        self.skipping = False  # inside an over-long line: drop bytes until its end
        self.first = True  # the request line is websockets' to judge
        self.done = False
        self.oversized: str | None = None

    def feed(self, data: bytes) -> bytes:
        if self.done:
            return b"" if self.refusal is not None else data
        out = bytearray()
        start = 0
        while start < len(data):
            newline = data.find(b"\n", start)
            end = len(data) if newline < 0 else newline + 1
            piece = data[start:end]
            start = end
            if self.skipping:
                self.skipping = newline < 0
                continue
            self.line += piece
            if len(self.line) > self.limit and self.first:
                return self._refuse(
                    http.HTTPStatus.REQUEST_URI_TOO_LONG,
                    f"the request line is over {self.limit} bytes",
                )
            if len(self.line) > self.limit:
                name = bytes(self.line.split(b":", 1)[0]).strip().lower()
                self.oversized = self.oversized or name.decode("latin-1")[:64]
                self.skipping = newline < 0
                self.line.clear()
                continue
            if newline < 0:
                continue
            line = bytes(self.line)
            self.line.clear()
            ended = line in (b"\r\n", b"\n")
            if self.first:
                refusal = _request_line_refusal(line)
            elif ended:
                refusal = None
            else:
                self.headers += 1
                refusal = _header_line_refusal(line)
                if refusal is None and self.headers > self.max_headers:
                    refusal = HeadRefusal(
                        http.HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
                        f"more than {self.max_headers} header lines",
                    )
            if refusal is not None:
                self.refusal = refusal
                self.done = True
                return b""
            out += line
            self.first = False
            if ended:
                self.done = True
                out += data[start:]
                break
        return bytes(out)

    def _refuse(self, status: http.HTTPStatus, reason: str) -> bytes:
        self.refusal = HeadRefusal(status, reason)
        self.done = True
        self.line.clear()
        return b""


class HandshakeGate(Generic[K]):
    """Connections by stage (no I/O): ``pending`` from accept until the server decided on
    the request (oldest first), ``admitted`` once it accepted one as a WebSocket
    connection, ``live`` all of them until they are gone."""

    def __init__(
        self,
        max_handshakes: int,
        max_connections: int,
        on_evicted: Callable[[], None] | None = None,
    ) -> None:
        if max_handshakes < 1 or max_connections < 1:
            raise ValueError("max_handshakes and max_connections: must be at least 1")
        self.max_handshakes = max_handshakes
        self.max_connections = max_connections
        self.pending: dict[K, None] = {}  # insertion order: oldest first
        self.admitted: set[K] = set()
        self.live: set[K] = set()
        self.evicted = 0
        self.on_evicted = on_evicted  # runs when a handshake was dropped for a newer one

    def arrive(self, key: K) -> K | None:
        """A connection was accepted. Returns the handshake to drop (the oldest in
        progress) when more than ``max_handshakes`` are in progress now."""
        self.live.add(key)
        self.pending[key] = None
        if len(self.pending) <= self.max_handshakes:
            return None
        oldest = next(iter(self.pending))
        del self.pending[oldest]
        self.evicted += 1
        return oldest

    def decided(self, key: K) -> None:
        """The server has the request head and decides now: no longer in progress."""
        self.pending.pop(key, None)

    def admit(self, key: K) -> bool:
        """Take a connection slot for ``key``; False when ``max_connections`` are taken."""
        if key in self.admitted:
            return True
        if len(self.admitted) >= self.max_connections:
            return False
        self.admitted.add(key)
        return True

    def gone(self, key: K) -> None:
        self.pending.pop(key, None)
        self.admitted.discard(key)
        self.live.discard(key)


class GuardedConnection(ServerConnection):
    """A ``ServerConnection`` whose request head goes through ``HeadFilter`` first;
    ``oversized_header`` names a header line that was over the limit (or is ``None``).
    A head that must be refused here is answered and the connection closed. With a
    ``gate`` (see ``guarded``), the connection is counted from accept to loss."""

    gate: ClassVar[HandshakeGate[GuardedConnection] | None] = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head: HeadFilter | None = HeadFilter()

    @property
    def oversized_header(self) -> str | None:
        return None if self._head is None else self._head.oversized

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self.gate is not None:
            evicted = self.gate.arrive(self)
            if evicted is not None:
                evicted.transport.abort()
                if self.gate.on_evicted is not None:
                    self.gate.on_evicted()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.gate is not None:
            self.gate.gone(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        head = self._head
        if head is not None and not head.done:
            data = head.feed(data)
            if head.refusal is not None:
                self._answer_head(head.refusal)
                return
            if not data:
                return
        super().data_received(data)

    def _answer_head(self, refusal: HeadRefusal) -> None:
        if self.gate is not None:
            self.gate.decided(self)
        transport = self.transport
        if not transport.is_closing():
            transport.write(refusal_bytes(refusal))
            transport.close()


def guarded(
    base: type[ServerConnection], gate: HandshakeGate[GuardedConnection] | None = None
) -> type[ServerConnection]:
    """A subclass of ``base`` whose request head goes through ``HeadFilter`` first (the
    filter runs before ``base.data_received``), counted by ``gate`` when given."""
    return type(f"Guarded{base.__name__}", (GuardedConnection, base), {"gate": gate})


class QuietClientHandshakeFailures(logging.Filter):
    """Drop websockets' (15.x, 16.x) "opening handshake failed" error for a client that
    closed or was dropped before sending a valid request head (answered here, dropped for
    a newer handshake, or gone): that is the client's doing, and a flood of such
    connections must not flood the log with tracebacks. A failure of the server's own
    handshake code (another exception) is kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != "opening handshake failed" or not record.exc_info:
            return True
        return not isinstance(record.exc_info[1], InvalidMessage)


def quiet_client_handshake_failures(logger: logging.Logger) -> logging.Logger:
    """``logger`` with a ``QuietClientHandshakeFailures`` filter (added once)."""
    if not any(isinstance(f, QuietClientHandshakeFailures) for f in logger.filters):
        logger.addFilter(QuietClientHandshakeFailures())
    return logger
