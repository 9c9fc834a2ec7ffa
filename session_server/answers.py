"""Encoding an answer within the answer bound, without holding the event loop.

``encode_bounded`` encodes a JSON-RPC response in pieces, yielding to the loop every
``ENCODE_SLICE`` seconds, and answers -32004 instead once ``max_answer_bytes`` would be
passed; ``is_utf8`` tells a text frame that is not UTF-8 (closed with 1007).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Final

from .core.errors import TooLargeError
from .rpc.protocol import Invalid, encode_message, encode_pieces, error_response
from .rpc.protocol import Request as RpcRequest

__all__ = ["ENCODE_SLICE", "encode_bounded", "is_utf8"]


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
