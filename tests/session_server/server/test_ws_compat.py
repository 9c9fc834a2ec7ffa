"""``ws_compat``, the one module reaching past websockets' public API, on a live connection
of the installed websockets: each thing it relies on is driven and observed here, so a
release that changes one of them fails this file (CI runs it on 15.x, 16.x and 17.x)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.frames import Frame, Opcode
from websockets.protocol import Event

from session_server.server.ws_compat import (
    HANDOVER_BYTES,
    SUPPORTED_MAJORS,
    HandoverReader,
    install_handover_reader,
    pending_bytes,
    route_queue_flow,
    websockets_major,
    write_text_now,
)
from tests.support.waiting import until


class Probe(ServerConnection):
    """Records the frames ``process_event`` sees and the queue's pause/resume calls."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        install_handover_reader(self)
        self.frames: list[Frame] = []
        self.flow: list[str] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        route_queue_flow(
            self, lambda: self.flow.append("pause"), lambda: self.flow.append("resume")
        )

    def process_event(self, event: Event) -> None:
        if isinstance(event, Frame):
            self.frames.append(event)
        super().process_event(event)


@dataclass
class Pair:
    server: Probe
    client: ClientConnection
    done: asyncio.Event = field(default_factory=asyncio.Event)


@pytest.fixture
async def pair() -> AsyncIterator[Pair]:
    accepted: asyncio.Queue[Probe] = asyncio.Queue()
    done = asyncio.Event()

    async def handler(ws: ServerConnection) -> None:
        assert isinstance(ws, Probe)
        await accepted.put(ws)
        await done.wait()

    async with serve(handler, "127.0.0.1", 0, create_connection=Probe, max_queue=1) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}", max_size=None) as client:
            probe = await asyncio.wait_for(accepted.get(), 10)
            yield Pair(probe, client, done)
            done.set()


def test_the_installed_major_is_supported() -> None:
    assert websockets_major() in SUPPORTED_MAJORS


async def test_pending_bytes_counts_a_partial_frame(pair: Pair) -> None:
    raw = Frame(Opcode.TEXT, b"x" * 1000).serialize(mask=True, extensions=[])
    head = len(raw) - 1000  # parsed as soon as it arrives; the payload waits whole
    pair.client.transport.write(raw[:500])
    await until(lambda: pending_bytes(pair.server) == 500 - head, "the bytes to arrive")
    pair.client.transport.write(raw[500:])
    assert await asyncio.wait_for(pair.server.recv(decode=False), 10) == b"x" * 1000
    assert pending_bytes(pair.server) == 0


async def test_the_handover_reader_reads_large_payloads_whole(pair: Pair) -> None:
    assert isinstance(pair.server.protocol.reader, HandoverReader)
    payload = bytes(range(256)) * (HANDOVER_BYTES // 256 + 3)
    await pair.client.send(payload)
    assert await asyncio.wait_for(pair.server.recv(decode=False), 10) == payload
    assert [f.opcode for f in pair.server.frames] == [Opcode.BINARY]
    assert len(pair.server.frames[0].data) == len(payload)


async def test_the_frame_queue_pauses_and_resumes_through_the_routed_calls(pair: Pair) -> None:
    for i in range(4):  # max_queue=1: the queue asks for a pause past one frame
        await pair.client.send(f"m{i}")
    await until(lambda: "pause" in pair.server.flow, "the frame queue to pause")
    for i in range(4):
        assert await asyncio.wait_for(pair.server.recv(), 10) == f"m{i}"
    assert pair.server.flow[-1] == "resume"


async def test_write_text_now_writes_one_text_frame_while_open(pair: Pair) -> None:
    assert write_text_now(pair.server, b'{"a":1}')
    assert await asyncio.wait_for(pair.client.recv(), 10) == '{"a":1}'
    await pair.server.close()
    assert not write_text_now(pair.server, b"late")
