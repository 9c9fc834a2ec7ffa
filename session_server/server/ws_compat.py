"""The one place that reaches past ``websockets``' public API (for the intake).

The server uses ``websockets`` through its public API (``serve`` and its options,
``ServerConnection`` as ``create_connection``, ``recv``/``send``/``close``, ``Request``,
``Response``, ``Headers``) everywhere but in the intake bound (``intake``), which must
see bytes before ``websockets`` turns them into messages and write small answers
without a task. What that needs of the library's internals is here and nowhere else:

- ``pending_bytes``: bytes received and not parsed into frames yet (the frame reader's
  buffer);
- ``install_handover_reader``: the frame reader hands a large payload over instead of
  copying it (``HandoverReader``);
- ``route_queue_flow``: the frame queue's pause/resume of the transport go through the
  intake's own pause rule;
- ``write_text_now``: write one text frame now when nothing else is being sent;
- ``frame_events``: ``ServerConnection.process_event`` sees each parsed frame (the intake
  overrides it).

Supported: ``websockets`` 15.x, 16.x and 17.x (``SUPPORTED_MAJORS``).
``tests/session_server/server/test_ws_compat.py`` drives each of these on a live connection of
the installed version; it fails when a release changes what they rely on, and CI runs it
on each supported major.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from importlib.metadata import version
from typing import Final

from websockets.asyncio.server import ServerConnection
from websockets.protocol import OPEN
from websockets.streams import StreamReader

__all__ = [
    "HANDOVER_BYTES",
    "SUPPORTED_MAJORS",
    "HandoverReader",
    "install_handover_reader",
    "pending_bytes",
    "route_queue_flow",
    "websockets_major",
    "write_text_now",
]

SUPPORTED_MAJORS: Final = (15, 16, 17)

HANDOVER_BYTES: Final = 64 * 1024
"""Payloads at least this big are handed over from the frame reader's buffer, not copied."""


def websockets_major() -> int:
    """The installed ``websockets``' major version."""
    return int(version("websockets").split(".", 1)[0])


class HandoverReader(StreamReader):
    """``read_exact`` gives away the whole buffer when it holds exactly what is asked for
    (a large payload that arrived alone, the common case) instead of copying it out: one
    copy of the frame less on the event loop."""

    def read_exact(self, n: int) -> Generator[None, None, bytearray]:
        # Not a generator itself: the parser runs ``yield from`` over what this returns,
        # and a small read (4 per frame) then costs no generator of this class.
        if n < HANDOVER_BYTES:
            return super().read_exact(n)
        return self._hand_over(n)

    def _hand_over(self, n: int) -> Generator[None, None, bytearray]:
        while len(self.buffer) < n:
            if self.eof:
                raise EOFError(f"stream ends after {len(self.buffer)} bytes, expected {n} bytes")
            yield
        if len(self.buffer) == n:
            data, self.buffer = self.buffer, bytearray()
            return data
        data = self.buffer[:n]
        del self.buffer[:n]
        return data


def install_handover_reader(connection: ServerConnection) -> None:
    """Make ``connection``'s frame reader a ``HandoverReader``. The parser is already
    suspended inside the reader (waiting for the handshake): the reader's class changes,
    not the object, so its state carries over."""
    connection.protocol.reader.__class__ = HandoverReader


def pending_bytes(connection: ServerConnection) -> int:
    """Bytes received on ``connection`` and not parsed into frames yet."""
    return len(connection.protocol.reader.buffer)


def route_queue_flow(
    connection: ServerConnection, pause: Callable[[], None], resume: Callable[[], None]
) -> None:
    """Call ``pause``/``resume`` where the frame queue would pause or resume reading the
    transport (call after ``connection_made``, which creates the queue)."""
    connection.recv_messages.pause = pause
    connection.recv_messages.resume = resume


def _send_busy(connection: ServerConnection) -> bool:
    # 16 and 17 name the send in progress ``send_in_progress``; 15 has only a fragmented
    # send's ``fragmented_send_waiter`` (an unfragmented send there never yields before
    # writing, so nothing else can be in progress).
    busy = getattr(connection, "send_in_progress", None)
    if busy is None:
        busy = getattr(connection, "fragmented_send_waiter", None)
    return busy is not None


def write_text_now(connection: ServerConnection, data: bytes) -> bool:
    """Write ``data`` as one text frame now, without a task, when ``send`` would not
    wait: the connection is open, no other message is being sent and writing is not
    paused. False: nothing was written (use ``send``). This is what ``send`` does in
    that case (``protocol.send_text``, then ``send_data``)."""
    if (
        connection.protocol.state is not OPEN
        or _send_busy(connection)
        or connection.paused
        or connection.transport.is_closing()
    ):
        return False
    connection.protocol.send_text(data)
    connection.send_data()
    return True
