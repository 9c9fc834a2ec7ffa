"""A TCP relay on 127.0.0.1 between a client and a server, that tells when a request left.

``Relay(target_port)`` listens on a port of its own (``url``) and pipes every connection
to ``127.0.0.1:target_port``, opened anew for each client connection (a server restarted
on that port is reached again). ``request_forwarded`` is set once bytes the client sent
after the server's first bytes (the WebSocket handshake's answer), that is a frame, have
been passed on to the server: from then on a request is in flight. A test kills the
server at that moment to leave a call in doubt, with no sleep.
"""

from __future__ import annotations

import asyncio
import contextlib


class Relay:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.request_forwarded = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.port = 0

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks)

    async def __aenter__(self) -> Relay:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
            except OSError:
                writer.transport.abort()  # nothing listens: the client sees a reset
                return
            answered = asyncio.Event()
            pipes = [
                asyncio.ensure_future(self._pipe(reader, up_writer, answered, upstream=True)),
                asyncio.ensure_future(self._pipe(up_reader, writer, answered, upstream=False)),
            ]
            try:
                await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for pipe in pipes:
                    pipe.cancel()
                await asyncio.gather(*pipes, return_exceptions=True)
                writer.transport.abort()
                up_writer.transport.abort()
        finally:
            self._tasks.discard(task)

    async def _pipe(
        self,
        source: asyncio.StreamReader,
        sink: asyncio.StreamWriter,
        answered: asyncio.Event,
        *,
        upstream: bool,
    ) -> None:
        with contextlib.suppress(OSError):
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
                if not upstream:
                    answered.set()
                elif answered.is_set():
                    self.request_forwarded.set()
