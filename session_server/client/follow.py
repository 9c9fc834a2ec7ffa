"""Follow a session's events across reconnects: no gap, no duplicate (I/O helper).

::

    async for event in follow("ws://127.0.0.1:8765", "support-bot", sid, after_seq=seen):
        handle(event)        # every event with seq > after_seq, in seq order, once

Each connection subscribes first (``events.subscribe`` answers the session's ``last_seq``
and notifications carry only later seqs), then loads what lies between the caller's
cursor and that ``last_seq`` with ``events.load {after_seq}``, in pages; notifications
that arrive meanwhile are buffered by the subscription. When the connection drops, the
client reconnects within ``reconnect_budget`` seconds and its subscription resumes after
the last seq it received; when that budget is spent, or the server refuses for now
(HTTP 503, or a retryable -32005), the helper opens a new client (exponential backoff,
capped at ``max_delay``) and resumes after the last seq it yielded. Events deleted while disconnected are simply not seen.
When the session is deleted the iteration ends (the server's ``session.deleted``); an
unknown session raises ``NotFoundError``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from websockets.exceptions import WebSocketException

from ..values.errors import UnavailableError
from ..values.events import SessionEvent
from . import ConnectionLostError, SessionClient

__all__ = ["follow"]


async def follow(
    url: str | Callable[[], str],
    agent_id: str,
    session_id: str,
    *,
    after_seq: int = 0,
    token: str | None = None,
    retry_delay: float = 0.05,
    max_delay: float = 2.0,
    max_attempts: int | None = None,
    page_size: int = 500,
    reconnect_budget: float = 30.0,
) -> AsyncIterator[SessionEvent]:
    """Every event of ``session_id`` with seq > ``after_seq``, now and later, in order.

    ``url`` may be a callable giving the current URL (a server that moved). A failed
    connection is retried after ``retry_delay`` doubling up to ``max_delay``; after
    ``max_attempts`` consecutive failures (``None``: never give up) the last error is
    raised.
    """
    cursor = after_seq
    failures = 0
    while True:
        try:
            address = url() if callable(url) else url
            client = SessionClient(
                address,
                agent_id,
                token=token,
                reconnect_budget=reconnect_budget,
                retry_delay=retry_delay,
                max_retry_delay=max_delay,
            )
            async with client:
                sub = await client.subscribe(session_id)
                failures = 0
                async with sub:
                    while cursor < sub.last_seq:
                        page = await client.load_events(
                            session_id, after_seq=cursor, tail=False, limit=page_size
                        )
                        page = [e for e in page if e.seq <= sub.last_seq]
                        for event in page:
                            yield event
                            cursor = event.seq
                        if len(page) < page_size:
                            break
                    cursor = max(cursor, sub.last_seq)
                    async for event in sub:
                        if event.seq > cursor:
                            yield event
                            cursor = event.seq
                    return  # the session was deleted (or the subscription closed)
        except (ConnectionLostError, OSError, WebSocketException, UnavailableError):
            failures += 1
            if max_attempts is not None and failures >= max_attempts:
                raise
            await asyncio.sleep(min(max_delay, retry_delay * 2 ** (failures - 1)))
