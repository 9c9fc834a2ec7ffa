"""The unread-answer bound of ``connection_pump.Connection`` (issue 33, finding 4): one
server-wide ``ByteBudget`` and a share per connection, answers and notifications alike.

Real in-process server on 127.0.0.1, real sockets; a client that "does not read" is a
``websockets`` connection whose one-frame queue is never consumed (then it stops reading
its socket, as a stalled peer does). The heavy RSS check is in
``tests/faults/test_unread_answers_rss.py``.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec

from session_server.client import SessionClient
from session_server.server import SessionServer
from tests.support.hardening import noise, request, stalled
from tests.support.server import running_server
from tests.support.waiting import until

AGENT = "answers-agent"
DEADLINE_S = 20.0  # guards against a hung server; never used to synchronise
KIB = 1024
SHARE = 256 * KIB
TOTAL = 400 * KIB  # about two shares' worth: a third stalled connection finds no room

_ENC = msgspec.json.Encoder()
_DEC = msgspec.json.Decoder()


def shares_add_up(server: SessionServer) -> bool:
    """Every byte the server-wide budget counts is counted by a connection's share too (a
    reservation still waiting for server-wide room is counted by its share only)."""
    held = sum(conn.answer_room.in_use for conn in server._connections)
    return 0 < server.answer_budget.in_use <= held


async def test_stalled_readers_share_one_server_wide_bound(tmp_path: Path) -> None:
    """Three clients pipelining loads of 100 kB answers, reading none: each stops being
    served at its share, together they hold no more than the server-wide bound (the
    third waits for room rather than adding its answers), another client's session.get
    is answered meanwhile, and once they go everything they held is given back."""
    async with running_server(
        tmp_path / "memory",
        max_answer_bytes=200_000,
        max_outgoing_bytes=SHARE,
        max_unread_answer_bytes=TOTAL,
    ) as running:
        server = running.server
        async with SessionClient(running.url, AGENT) as client:
            await client.create_session(session_id="s")
            await client.append_events("s", [{"content": noise(20_000)} for _ in range(10)])
            readers = [await stalled(running.url, AGENT) for _ in range(3)]
            for ws in readers:
                for i in range(200):
                    await ws.send(request(i, "events.load", session_id="s", limit=5), text=True)
            await until(lambda: server.answer_budget.waiting, "a request waiting for room")
            assert server.answer_budget.peak <= TOTAL
            for conn in server._connections:
                assert conn.answer_room.peak <= SHARE
            assert shares_add_up(server)
            async with asyncio.timeout(DEADLINE_S):
                assert (await client.get_session("s"))["id"] == "s"
            for ws in readers:
                ws.transport.abort()
            await until(lambda: len(server._connections) == 1, "the stalled connections gone")
            await until(lambda: server.answer_budget.in_use == 0, "every byte given back")
            assert server.answer_budget.waiting == 0


async def test_notifications_of_stalled_subscribers_count_toward_the_bound(
    tmp_path: Path,
) -> None:
    """Three subscribers that never read while 100 kB events are appended until each has
    fallen behind: what they hold stays within the server-wide bound (beyond it they get
    ``events.gap``, not more queued bytes), and nothing is left counted once they are
    gone."""
    async with running_server(
        tmp_path / "memory",
        max_outgoing_bytes=SHARE,
        max_unread_answer_bytes=TOTAL,
        max_subscriber_bytes=SHARE,
    ) as running:
        server = running.server
        async with SessionClient(running.url, AGENT) as writer:
            await writer.create_session(session_id="sub")
            subscribers = [await stalled(running.url, AGENT) for _ in range(3)]
            for ws in subscribers:
                await ws.send(request(1, "events.subscribe", session_id="sub"), text=True)
            await until(
                lambda: sum(len(c.subscriptions) for c in server._connections) == 3,
                "three subscriptions",
            )

            def behind() -> bool:
                subs = [s for c in server._connections for s in c.subscriptions.values()]
                return len(subs) == 3 and all(s.gap is not None for s in subs)

            appended = 0
            while not behind():  # past what the sockets' buffers take, then some
                assert appended < 1000, "the subscribers never fell behind"
                await writer.append_events("sub", [{"content": noise(100_000)}])
                appended += 1
            one_notification = 101_000
            assert server.answer_budget.peak <= TOTAL + 3 * one_notification
            assert shares_add_up(server)
            for ws in subscribers:
                ws.transport.abort()
            await until(lambda: len(server._connections) == 1, "the subscribers gone")
            await until(lambda: server.answer_budget.in_use == 0, "every byte given back")


async def test_a_socket_that_takes_nothing_is_dropped_after_the_write_timeout(
    tmp_path: Path,
) -> None:
    """A client that stops reading with an answer queued is dropped once its socket has
    taken nothing for ``write_timeout``, and its room is given back."""
    async with running_server(
        tmp_path / "memory",
        max_answer_bytes=2_000_000,
        max_outgoing_bytes=4_000_000,
        write_timeout=0.5,
    ) as running:
        server = running.server
        async with SessionClient(running.url, AGENT) as client:
            await client.create_session(session_id="s")
            await client.append_events("s", [{"content": noise(1_500_000)}])
            ws = await stalled(running.url, AGENT)
            for i in range(8):
                await ws.send(request(i, "events.load", session_id="s"), text=True)
            await until(lambda: len(server._connections) == 1, "the stalled client dropped")
            await until(lambda: server.answer_budget.in_use == 0, "every byte given back")
            async with asyncio.timeout(DEADLINE_S):
                assert (await client.get_session("s"))["id"] == "s"
            ws.transport.abort()


async def test_the_defaults_derive_from_the_answer_bound(tmp_path: Path) -> None:
    """Share: two whole answers per connection; server-wide: sixteen; never less than a
    share."""
    async with running_server(tmp_path / "a", max_answer_bytes=1_000_000) as running:
        assert running.server.max_outgoing_bytes == 2_000_000
        assert running.server.answer_budget.capacity == 16_000_000
    async with running_server(
        tmp_path / "b", max_outgoing_bytes=5_000_000, max_unread_answer_bytes=1_000_000
    ) as running:
        assert running.server.answer_budget.capacity == 5_000_000
