"""Answers: how much room a frame's answer needs, and encoding it within the bound.

``answer_reservation`` decides (pure) how many bytes of the unread-answer budgets a frame
reserves before it runs: ``max_answer_bytes`` when one of its requests may answer that
much (a read of events, a view, a build, an export: their answers are not bounded by
what the client sent), nothing when every request is of ``FRAME_BOUNDED_METHODS``, whose
answers are small or bounded by the frame itself (the frame is counted by the request
budget): those answers are counted once encoded. ``encode_bounded`` encodes a JSON-RPC
response in pieces, yielding to the loop every ``ENCODE_SLICE`` seconds, and answers
-32004 instead once ``max_answer_bytes`` would be passed; ``is_utf8`` tells a text frame
that is not UTF-8 (closed with 1007).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Final

from ..rpc.protocol import Frame, Invalid, encode_message, encode_pieces, error_response
from ..rpc.protocol import Request as RpcRequest
from ..values.errors import TooLargeError

__all__ = [
    "ENCODE_SLICE",
    "FRAME_BOUNDED_METHODS",
    "answer_reservation",
    "encode_bounded",
    "is_utf8",
]

FRAME_BOUNDED_METHODS: Final = frozenset(
    {
        # Writes answer seqs, counts or the session row (metadata: at most 64 KiB).
        "events.append",
        "turn.persist",
        "events.delete",
        "session.create",
        "session.update",
        "session.delete",
        "memory.set_strategy",
        # Reads whose answer is one session row or one strategy.
        "session.get",
        "memory.get_strategy",
        # The subscribe answer is ``{last_seq}``; notifications are counted as queued.
        "events.subscribe",
        "events.unsubscribe",
    }
)
"""Methods whose answers are small or bounded by their own frame: they reserve no answer
room before they run (the sequential and pipelined write paths pay nothing). Any other
method, a new one included, reserves ``max_answer_bytes``."""


def answer_reservation(frame: Frame, max_answer_bytes: int) -> int:
    """Bytes of answer room ``frame`` reserves before it runs: ``max_answer_bytes`` (a
    batch's answers together stay under it too) when a request of it may answer more
    than its frame holds, else 0. A notification reserves as a request does (its result
    is made, then dropped); an invalid item answers one small error."""
    for item in frame.items:
        if isinstance(item, Invalid):
            continue
        if item.method not in FRAME_BOUNDED_METHODS:
            return max_answer_bytes
    return 0


def is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


ENCODE_SLICE: Final = 0.002
"""Seconds of answer encoding between two yields to the event loop."""


async def encode_bounded(
    response: dict[str, Any],
    item: RpcRequest | Invalid,
    limit: int,
    refused: Callable[[], None] | None = None,
) -> bytes:
    """``response`` encoded, or a -32004 answer when it would exceed ``limit`` bytes.

    Encoded in pieces (``encode_pieces``), yielding to the loop every ``ENCODE_SLICE``
    seconds: a 16 MiB answer never holds the loop (or the GIL) for the whole encoding,
    and encoding stops as soon as the bound is passed; ``refused()``, when given, is
    called then (the request's metrics report -32004).
    """
    parts: list[bytes] = []
    size = 0
    mark = time.perf_counter()
    for piece in encode_pieces(response):
        size += len(piece)
        if size > limit:
            break
        parts.append(piece)
        if time.perf_counter() - mark > ENCODE_SLICE:
            await asyncio.sleep(0)
            mark = time.perf_counter()
    else:
        return b"".join(parts)
    del parts
    if refused is not None:
        refused()
    error = TooLargeError(
        f"the answer would be more than {size} bytes, more than the server sends at once "
        f"({limit} bytes left of max_answer_bytes); ask for less (limit, paging)",
        data={"answer_bytes": size, "max_answer_bytes": limit},
    )
    return encode_message(error_response(item.id, error))
