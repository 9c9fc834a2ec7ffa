"""Over-long header lines in a handshake get an HTTP answer, not a dropped connection.

``websockets`` refuses any request line longer than ``websockets.http11.MAX_LINE_LENGTH``
(8 KiB) by closing the connection without an answer (and logging a traceback). A token
can be that long (a signed token listing many agent patterns), and its presenter deserves
a 401 that says why. ``GuardedConnection`` (passed to ``serve(create_connection=...)``,
or ``guarded(cls)`` to put it in front of another ``ServerConnection`` class) runs the bytes of the request head through ``HeadFilter`` before ``websockets`` parses
them: a header line over the limit is dropped and its name recorded in
``oversized_header``; the server's ``process_request`` then answers 401 (``token too
long``) for ``Authorization`` and 431 for any other header. An over-long request line
(the path) is left to ``websockets``. Everything after the head passes untouched.
"""

from __future__ import annotations

from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.http11 import MAX_LINE_LENGTH

__all__ = ["GuardedConnection", "HeadFilter", "guarded"]


class HeadFilter:
    """A state machine over the bytes of one HTTP request head (no I/O).

    ``feed(data)`` returns the bytes to hand on: the head with over-long header lines
    removed, then everything after the head unchanged. ``oversized`` is the lower-case
    name of the first header removed (``None`` when none was). A line being read is held
    back until it ends, at most ``limit`` bytes of it.
    """

    __slots__ = ("done", "first", "limit", "line", "oversized", "skipping")

    def __init__(self, limit: int = MAX_LINE_LENGTH) -> None:
        self.limit = limit
        self.line = bytearray()
        self.skipping = False  # inside an over-long line: drop bytes until its end
        self.first = True  # the request line is websockets' to judge
        self.done = False
        self.oversized: str | None = None

    def feed(self, data: bytes) -> bytes:
        if self.done:
            return data
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
            if len(self.line) > self.limit and not self.first:
                name = bytes(self.line.split(b":", 1)[0]).strip().lower()
                self.oversized = self.oversized or name.decode("latin-1")[:64]
                self.skipping = newline < 0
                self.line.clear()
                continue
            if newline < 0:
                if self.first and len(self.line) > self.limit:
                    self.done = True  # websockets refuses it; nothing to keep apart
                    out += self.line + data[start:]
                    self.line.clear()
                    break
                continue
            out += self.line
            ended = bytes(self.line) in (b"\r\n", b"\n")
            self.line.clear()
            self.first = False
            if ended:
                self.done = True
                out += data[start:]
                break
        return bytes(out)


class GuardedConnection(ServerConnection):
    """A ``ServerConnection`` whose request head goes through ``HeadFilter`` first;
    ``oversized_header`` names a header line that was over the limit (or is ``None``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head: HeadFilter | None = HeadFilter()

    @property
    def oversized_header(self) -> str | None:
        return None if self._head is None else self._head.oversized

    def data_received(self, data: bytes) -> None:
        head = self._head
        if head is not None and not head.done:
            data = head.feed(data)
            if not data:
                return
        super().data_received(data)


def guarded(base: type[ServerConnection]) -> type[ServerConnection]:
    """A subclass of ``base`` whose request head goes through ``HeadFilter`` first (the
    filter runs before ``base.data_received``)."""
    return type(f"Guarded{base.__name__}", (GuardedConnection, base), {})
