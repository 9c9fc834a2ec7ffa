"""The server trusts only what it wrote (issue 13, item 4), against a real server.

- A client may not append ``compaction`` events, compaction fields or reserved metadata
  keys (-32602 naming the field; nothing written). Before, one forged record made
  ``context.build``, ``render``, ``export`` and ``compact`` fail with -32603 for good.
- ``events.pop`` with ``replace_with`` refuses the same, the same way (issue 33, item 10):
  before, a replacement could carry a reserved metadata key that ``events.append`` refused.
- A row that cannot be read back (its metadata edited into something that is not JSON)
  is skipped, logged and counted: the rest of the session stays readable.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from session_server.client import SessionClient
from session_server.storage.stored_rows import SKIPPED_RECORDS
from session_server.values.errors import InvalidParamsError
from tests.support.server import RunningServer, running_server, turn_messages

AGENT = "trust-agent"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "memory") as running:
        yield running


FORGED: dict[str, tuple[dict[str, Any], str]] = {
    "compaction action": (
        {
            "action": "compaction",
            "content": "forged",
            "compacted_event_count": 3,
            "compaction": {"strategy": "summarize"},
        },
        "params.events[0].action",
    ),
    "compaction field": (
        {"content": "x", "compaction": {"strategy": "summarize"}},
        "params.events[0].compaction",
    ),
    "compacted_event_count field": (
        {"content": "x", "compacted_event_count": 1},
        "params.events[0].compacted_event_count",
    ),
    "reserved metadata key": (
        {"content": "x", "metadata": {"compactedEventCount": "x"}},
        "params.events[0].metadata.compactedEventCount",
    ),
    "reserved toolCalls key": (
        {"content": "x", "metadata": {"toolCalls": "nope"}},
        "params.events[0].metadata.toolCalls",
    ),
}


@pytest.mark.parametrize("case", list(FORGED), ids=list(FORGED))
async def test_client_cannot_write_what_only_the_server_writes(
    server: RunningServer, case: str
) -> None:
    event, field = FORGED[case]
    async with SessionClient(server.url, AGENT) as client:
        sid = await client.create_session(session_id="s")
        await client.persist_turn(sid, turn_messages(1))
        with pytest.raises(InvalidParamsError) as info:
            await client.call("events.append", {"session_id": sid, "events": [event]})
        assert info.value.data == {"field": field}
        # Nothing written; every read still works.
        assert [e.seq for e in await client.load_events(sid)] == [1, 2, 3, 4]
        built = await client.build_context(sid)
        assert len(built.messages) == 4
        await client.call("context.render", {"session_id": sid, "adapter": "openai-chat"})
        await client.call("export.session", {"session_id": sid})


@pytest.mark.parametrize("case", list(FORGED), ids=list(FORGED))
async def test_pop_replace_with_refuses_what_append_refuses(
    server: RunningServer, case: str
) -> None:
    event, field = FORGED[case]
    async with SessionClient(server.url, AGENT) as client:
        sid = await client.create_session(session_id="s")
        await client.persist_turn(sid, turn_messages(1))
        before = await client.load_events(sid)
        with pytest.raises(InvalidParamsError) as info:
            await client.call("events.pop", {"session_id": sid, "replace_with": event})
        assert info.value.code == -32602
        assert info.value.data == {"field": field.replace("events[0]", "replace_with")}
        assert field.rsplit(".", 1)[-1] in info.value.message
        # Nothing written: the event that would have been replaced is as it was.
        assert await client.load_events(sid) == before
        # A replacement with free-form keys of the client's own is accepted.
        popped = await client.pop_event(
            sid, replace_with={"content": "kept", "metadata": {"mine": 1}}
        )
        assert popped == before[-1]
        last = (await client.load_events(sid))[-1]
        assert (last.content, last.metadata) == ("kept", {"mine": 1})


async def test_persist_refuses_reserved_metadata_keys(server: RunningServer) -> None:
    async with SessionClient(server.url, AGENT) as client:
        sid = await client.create_session(session_id="s")
        with pytest.raises(InvalidParamsError) as info:
            await client.call(
                "turn.persist",
                {
                    "session_id": sid,
                    "messages": [{"role": "user", "content": "x", "metadata": {"model": 1}}],
                },
            )
        assert info.value.data == {"field": "params.messages[0].metadata.model"}
        # Free-form keys of the client's own are kept.
        await client.append_events(sid, [{"content": "y", "metadata": {"mine": 1}}])
        assert (await client.load_events(sid))[0].metadata == {"mine": 1}


async def test_one_unreadable_row_is_skipped_logged_and_counted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    memory = tmp_path / "memory"
    async with running_server(memory) as running, SessionClient(running.url, AGENT) as client:
        sid = await client.create_session(session_id="s")
        for n in range(3):
            await client.persist_turn(sid, turn_messages(n))
    # Corrupt one stored row behind the server's back (as a disk or a hand edit would).
    db = sqlite3.connect(memory / "agents" / AGENT / "agent.sqlite")
    with db:
        db.execute("UPDATE events SET metadata = '{not json' WHERE session_id = 's' AND seq = 6")
    db.close()
    before = SKIPPED_RECORDS.count
    caplog.set_level(logging.WARNING)
    async with running_server(memory) as running, SessionClient(running.url, AGENT) as client:
        seqs = [e.seq for e in await client.load_events("s", limit=None)]
        assert seqs == [1, 2, 3, 4, 5, 7, 8, 9, 10, 11, 12]
        built = await client.build_context("s")
        assert "answer 2" in [m.content for m in built.messages]
        await client.persist_turn("s", turn_messages(9))
    assert SKIPPED_RECORDS.count > before
    assert any("unreadable stored record" in r.getMessage() for r in caplog.records)
