"""A blocking client that reconnects on its own, for scripts and ``Runner.run_sync``.

::

    with SyncSessionClient("ws://127.0.0.1:8765", "support-bot") as client:
        sid = client.create_session()
        client.persist_turn(sid, [ContextMessage(role="user", content="hi")])
        print(client.build_context(sid).messages)

It has the methods of :class:`session_server.client.SessionClient` (same names, same
arguments; ``subscribe``, ``subscribe_live`` and ``stream`` excepted: use
:func:`session_server.client.follow.follow`, and ``stream_open``, ``stream_append``,
``stream_close`` for live turns), blocking.
The connection lives on an event loop of its own, in a daemon thread, so the client works
from plain code, from any event loop and from loops that come and go (``asyncio.run``
per call, as ``Runner.run_sync`` does); ``await client.acall("build_context", sid)`` runs
a call from async code without blocking its loop.

Reconnection is the ``SessionClient``'s own (``session_server.client.connection``): a
call waits up to ``reconnect_budget`` seconds (default 30) for a server that is down or
restarting, with exponential backoff and jitter, then raises ``ServerUnavailable``
(naming the URL and the time spent). A call whose connection is lost after it was sent is
sent again when running it twice does what running it once does: reads, and the keyed
writes (``append_events``, ``persist_turn`` and ``persist_context`` always carry an
idempotency key, generated when the caller gives none, so a retried write happens once).
``create_session`` is safe too (the client draws the session id and the server returns
the session a first attempt made) unless it names a ``session_id`` without
``if_exists="return"``. The others raise ``OutcomeUnknownError`` ("may or may not have
been applied"): ``delete_session``, ``clear_session``, ``delete_events``, ``pop_event``,
``compact``, ``import_session``, ``restore_agent``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import warnings
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import Future
from types import TracebackType
from typing import Any, Final

from . import ConnectionLostError, SessionClient

__all__ = ["SyncSessionClient"]

_NOT_PROXIED: Final = frozenset(
    {"subscribe", "subscribe_live", "stream", "connect", "close", "call"}
)
# How long a blocking call may take beyond the reconnect budget, when no timeout is given.
_CALL_MARGIN: Final = 60.0


class SyncSessionClient:
    """Blocking ``SessionClient`` calls on a private loop, reconnecting when needed.

    ``SyncSessionClient(url, agent_id, *, token=None, reconnect_budget=30.0,
    retry_delay=0.05, max_retry_delay=2.0, timeout=None, **options)``: the reconnect
    settings are the ``SessionClient``'s (``options`` too: ``max_size``,
    ``open_timeout``, ...). ``timeout`` bounds each blocking call overall (default
    ``reconnect_budget`` + 60 s); a call past it is cancelled and raises ``TimeoutError``.
    ``retries`` is deprecated and ignored: the budget bounds the retries.
    """

    def __init__(
        self,
        url: str | Sequence[str],
        agent_id: str | None,
        *,
        token: str | None = None,
        reconnect_budget: float = 30.0,
        retry_delay: float = 0.05,
        max_retry_delay: float = 2.0,
        timeout: float | None = None,
        retries: int | None = None,
        **options: Any,
    ) -> None:
        if retries is not None:
            warnings.warn(
                "SyncSessionClient(retries=...) is ignored: reconnect_budget (seconds) bounds "
                "the retries",
                DeprecationWarning,
                stacklevel=2,
            )
        self.agent_id = agent_id
        self.reconnect_budget = reconnect_budget
        self.timeout = reconnect_budget + _CALL_MARGIN if timeout is None else timeout
        # Built here: the agent id and the settings are checked before any thread starts.
        self._client = SessionClient(
            url,
            agent_id,
            token=token,
            reconnect_budget=reconnect_budget,
            retry_delay=retry_delay,
            max_retry_delay=max_retry_delay,
            **options,
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"session-client-{agent_id}", daemon=True
        )
        self._thread.start()
        self._closed = False

    @property
    def url(self) -> str:
        """The endpoint URL of the node the client talks to (or tries next)."""
        return self._client.url

    # -- running coroutines on the private loop ---------------------------------------
    def _submit(self, coro: Coroutine[Any, Any, Any]) -> Future[Any]:
        if self._closed:
            coro.close()
            raise ConnectionLostError("client is closed", data={"url": self.url})
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    async def _invoke(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        return await getattr(self._client, name)(*args, **kwargs)

    def run(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call the ``SessionClient`` method ``name`` and wait for its result."""
        future = self._submit(self._invoke(name, args, kwargs))
        try:
            return future.result(self.timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(
                f"{name}: no answer from {self.url} within {self.timeout} s (timeout)"
            ) from None

    async def acall(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """The same call from async code (any loop): awaits without blocking that loop."""
        return await asyncio.wrap_future(self._submit(self._invoke(name, args, kwargs)))

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_") or name in _NOT_PROXIED or not hasattr(SessionClient, name):
            raise AttributeError(f"SyncSessionClient has no attribute {name!r}")

        def method(*args: Any, **kwargs: Any) -> Any:
            return self.run(name, *args, **kwargs)

        method.__name__ = name
        method.__doc__ = getattr(SessionClient, name).__doc__
        return method

    # -- lifecycle ------------------------------------------------------------------------
    async def _shutdown(self) -> None:
        await self._client.close()

    def _stop_loop(self) -> None:
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def close(self) -> None:
        """Close the connection and stop the private loop (idempotent). Blocks until the
        close handshake is done: from async code use ``await aclose()``, which does not
        block the caller's loop (a server on that loop could not answer the handshake)."""
        if self._closed:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(self.timeout)
        finally:
            self._stop_loop()

    async def aclose(self) -> None:
        """``close()`` for async code: awaits the close handshake without blocking."""
        if self._closed:
            return
        try:
            await asyncio.wrap_future(
                asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
            )
        finally:
            self._stop_loop()

    def __enter__(self) -> SyncSessionClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
