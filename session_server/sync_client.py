"""A blocking client that reconnects on its own, for scripts and ``Runner.run_sync``.

::

    with SyncSessionClient("ws://127.0.0.1:8765", "support-bot") as client:
        sid = client.create_session()
        client.persist_turn(sid, [ContextMessage(role="user", content="hi")])
        print(client.build_context(sid).messages)

It has the methods of :class:`session_server.client.SessionClient` (same names, same
arguments; ``subscribe`` excepted: use :func:`session_server.follow.follow`), blocking.
The connection lives on an event loop of its own, in a daemon thread, so the client works
from plain code, from any event loop and from loops that come and go (``asyncio.run``
per call, as ``Runner.run_sync`` does); ``await client.acall("build_context", sid)`` runs
a call from async code without blocking its loop.

Reconnection: a call whose connection cannot be opened (refused, or a 503 at the
handshake) or that is refused for now (a retryable -32005 answer: nothing ran) is retried
on a new connection, ``retries`` times with a doubling delay (capped at 2 s). A call whose
connection is lost after it was sent may have run, so it is sent again only when running
it twice does what running it once does: reads, and the keyed writes (``append_events``,
``persist_turn`` and ``persist_context`` get an idempotency key before the first attempt,
so a retried write happens once). The others raise ``ConnectionLostError`` at once:
``create_session`` (use ``get_or_create_session``, which is safe), ``delete_session``,
``clear_session``, ``delete_events``, ``import_session`` and ``pop_event`` without
``event_id`` (pass the id of the event you read).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from types import TracebackType
from typing import Any, Final

from websockets.exceptions import WebSocketException

from .client import ConnectionLostError, SessionClient
from .core.codec import new_event_id
from .core.errors import UnavailableError

__all__ = ["SyncSessionClient", "replay_safe"]

_KEYED_WRITES: Final = frozenset({"append_events", "persist_turn", "persist_context"})
# Writes that may not be sent again once sent: a second run creates, deletes or clears
# something else, or answers an error for what the first run did.
_NOT_REPLAYED: Final = frozenset(
    {"create_session", "delete_session", "clear_session", "delete_events", "import_session"}
)
_NOT_PROXIED: Final = frozenset({"subscribe", "connect", "close", "call"})


def replay_safe(name: str, kwargs: dict[str, Any]) -> bool:
    """Whether the ``SessionClient`` call ``name`` may be sent again after its connection
    was lost once it was sent (it may have run): running it twice must do what running it
    once does."""
    if name == "pop_event":
        return kwargs.get("event_id") is not None
    return name not in _NOT_REPLAYED


class SyncSessionClient:
    """Blocking ``SessionClient`` calls on a private loop, reconnecting when needed."""

    def __init__(
        self,
        url: str,
        agent_id: str | None,
        *,
        token: str | None = None,
        retries: int = 5,
        retry_delay: float = 0.05,
        timeout: float | None = 60.0,
        **options: Any,
    ) -> None:
        self.url = url
        self.agent_id = agent_id
        self.retries = retries
        self.retry_delay = retry_delay
        self.timeout = timeout
        self._factory: Callable[[], SessionClient] = lambda: SessionClient(
            url, agent_id, token=token, **options
        )
        self._factory()  # validates the agent id before any thread starts
        self._client: SessionClient | None = None
        # One connect at a time: calls that find no connection share the one being made.
        self._connect_gate = asyncio.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"session-client-{agent_id}", daemon=True
        )
        self._thread.start()
        self._closed = False

    # -- running coroutines on the private loop ---------------------------------------
    def _submit(self, coro: Coroutine[Any, Any, Any]) -> Future[Any]:
        if self._closed:
            coro.close()
            raise ConnectionLostError("client is closed")
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    async def _connected(self) -> SessionClient:
        client = self._client
        if client is not None and client.lost is None:
            return client
        async with self._connect_gate:
            client = self._client
            if client is None or client.lost is not None:
                if client is not None:
                    await client.close()
                self._client = None
                client = await self._factory().connect()
                self._client = client
            return client

    async def _invoke(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if name in _KEYED_WRITES and not kwargs.get("idempotency_key"):
            kwargs = {**kwargs, "idempotency_key": new_event_id()}
        replayable = replay_safe(name, kwargs)
        delay = self.retry_delay
        for attempt in range(self.retries + 1):
            last = attempt == self.retries
            try:
                client = await self._connected()
            except (ConnectionLostError, OSError, WebSocketException, UnavailableError):
                if last:  # nothing was sent
                    raise
            else:
                try:
                    return await getattr(client, name)(*args, **kwargs)
                except UnavailableError:
                    if last:  # refused for now: nothing ran
                        raise
                except (ConnectionLostError, OSError, WebSocketException):
                    # Sent, perhaps run: only a call safe to run twice goes again (on a
                    # new connection: ``_connected`` sees the loss).
                    if last or not replayable:
                        raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")

    def run(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """Call the ``SessionClient`` method ``name`` and wait for its result."""
        return self._submit(self._invoke(name, args, kwargs)).result(self.timeout)

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
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

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
