"""``session.fork``, ``session.rewind``, ``session.branches`` and ``session.rewound`` over a
real server on 127.0.0.1, through the Python client (async and sync), with tokens."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from session_server.auth import mint_token
from session_server.client import SessionClient
from session_server.client.sync_client import SyncSessionClient
from session_server.values.errors import ForbiddenError, InvalidParamsError, NotFoundError
from tests.support.server import RunningServer, running_server, turn_messages
from tests.support.waiting import until

AGENT = "brancher"
SECRET = "branch-secret-" + "x" * 32


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "memory", secrets=[SECRET]) as running:
        yield running


def token(**claims: object) -> str:
    return mint_token(SECRET, agents=[AGENT], ttl=600, **claims)  # type: ignore[arg-type]


async def filled(client: SessionClient, turns: int, session_id: str | None = None) -> str:
    sid = await client.create_session(session_id=session_id)
    for n in range(1, turns + 1):
        await client.persist_turn(sid, turn_messages(n))
    return sid


async def test_fork_rewind_and_branches_over_rpc(server: RunningServer) -> None:
    async with SessionClient(server.url, AGENT, token=token(scope="write")) as client:
        sid = await filled(client, 2)
        at_8 = await client.build_context(sid)
        await client.persist_turn(sid, turn_messages(3))
        fork = await client.fork_session(sid, at_seq=8, metadata={"try": 2})
        assert fork["parent_session_id"] == sid
        assert (fork["fork_seq"], fork["last_seq"]) == (8, 8)
        row = await client.get_session(fork["session_id"])
        assert (row["parent_session_id"], row["fork_seq"], row["metadata"]) == (sid, 8, {"try": 2})
        built = await client.build_context(fork["session_id"])
        assert built.messages == at_8.messages
        rewound = await client.rewind_session(sid, 6, reason="try again")
        assert rewound == {
            "session_id": sid,
            "to_seq": 4,
            "rewind_seq": 13,
            "abandoned": {"from_seq": 5, "to_seq": 12},
            "branch_session_id": rewound["branch_session_id"],
            "requested_to_seq": 6,
            "moved_to_turn_start": True,
            "erased": 0,
        }
        assert [e.seq for e in await client.load_events(sid, limit=100)] == [1, 2, 3, 4]
        branches = await client.session_branches(sid)
        assert branches == [
            {"session_id": fork["session_id"], "fork_seq": 8, "kind": "fork"},
            {"session_id": rewound["branch_session_id"], "fork_seq": 4, "kind": "rewind"},
        ]
        listed = {s["id"]: s for s in await client.list_sessions()}
        assert listed[rewound["branch_session_id"]]["parent_session_id"] == sid
        erased = await client.rewind_session(sid, 0, erase=True)
        assert erased["branch_session_id"] is None and erased["erased"] == 4


async def test_refusals_name_the_field(server: RunningServer) -> None:
    async with SessionClient(server.url, AGENT, token=token(scope="write")) as client:
        sid = await filled(client, 1)
        with pytest.raises(InvalidParamsError, match="to_seq"):
            await client.call("session.rewind", {"session_id": sid, "to_seq": -1})
        with pytest.raises(InvalidParamsError, match="to_seq"):
            await client.rewind_session(sid, 99)
        with pytest.raises(InvalidParamsError, match="reason"):
            await client.rewind_session(sid, 0, reason="x" * 3000)
        with pytest.raises(InvalidParamsError, match="at_seq"):
            await client.fork_session(sid, at_seq=99)
        with pytest.raises(InvalidParamsError):
            await client.call("session.fork", {"session_id": sid, "at": 1})
        with pytest.raises(NotFoundError):
            await client.session_branches("missing")


async def test_tokens_fork_and_rewind_need_write_on_the_session(server: RunningServer) -> None:
    async with SessionClient(server.url, AGENT, token=token(scope="write")) as client:
        await filled(client, 1, session_id="mine")
        await filled(client, 1, session_id="other")
    async with SessionClient(server.url, AGENT, token=token(scope="read")) as reader:
        with pytest.raises(ForbiddenError):
            await reader.fork_session("mine")
        with pytest.raises(ForbiddenError):
            await reader.rewind_session("mine", 0)
        assert await reader.session_branches("mine") == []
    limited = token(scope="write", sessions=["mine"])
    async with SessionClient(server.url, AGENT, token=limited) as client:
        fork = await client.fork_session("mine", new_session_id="mine-2")
        assert fork["session_id"] == "mine-2"
        with pytest.raises(ForbiddenError):
            await client.fork_session("other")
        with pytest.raises(ForbiddenError):
            await client.get_session("mine-2")  # the token names only "mine"
        await client.rewind_session("mine", 0)


async def test_subscribers_hear_of_a_rewind(server: RunningServer) -> None:
    async with SessionClient(server.url, AGENT, token=token(scope="write")) as client:
        sid = await filled(client, 2)
        sub = await client.subscribe(sid)
        result = await client.rewind_session(sid, 4)
        await until(lambda: sub.rewinds == [(4, 9)], "the session.rewound notification")
        await client.persist_turn(sid, turn_messages(3))
        batch = await asyncio.wait_for(sub.next_batch(), 10)
        assert [e.seq for e in batch] == [10, 11, 12, 13]
        assert result["rewind_seq"] == 9
        await sub.close()


async def test_the_sync_client_forks_and_rewinds(server: RunningServer) -> None:
    client = SyncSessionClient(server.url, AGENT, token=token(scope="write"))
    try:
        sid = await client.acall("create_session")
        await client.acall("persist_turn", sid, turn_messages(1))
        fork = await client.acall("fork_session", sid)
        assert fork["fork_seq"] == 4
        rewound = await client.acall("rewind_session", fork["session_id"], 0)
        assert rewound["abandoned"] == {"from_seq": 1, "to_seq": 4}
        branches = await client.acall("session_branches", fork["session_id"])
        assert [b["kind"] for b in branches] == ["rewind"]
    finally:
        await client.aclose()
