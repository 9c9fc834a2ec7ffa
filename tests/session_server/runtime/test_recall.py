"""Recall over real agent files: search, erasure with the event, in_context, expand,
the backfill of a migrated file, reindex, summaries' sources."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from session_server import ActorRegistry, AgentActor
from session_server.storage.sqlite_open import MIGRATIONS
from session_server.values.errors import InvalidParamsError, NotFoundError
from session_server.values.events import ContextMessage, SessionEvent, ToolCall
from session_server.values.recall import SNIPPET_CLOSE, SNIPPET_OPEN
from tests.support.old_schema import old_agent_file
from tests.support.recall_index import indexed_rowids


@pytest.fixture
async def actor(tmp_path: Path) -> AsyncIterator[AgentActor]:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        yield await reg.get("agent")


def _db(tmp_path: Path) -> Path:
    return tmp_path / "agents" / "agent" / "agent.sqlite"


async def _say(actor: AgentActor, sid: str, *texts: str) -> list[int]:
    events = [SessionEvent(action="user_message", content=t) for t in texts]
    return list((await actor.append_events(sid, events)).seqs)


async def test_finds_words_phrases_accents_cjk_and_emoji(actor: AgentActor) -> None:
    sid = await actor.create_session()
    await _say(
        actor,
        sid,
        "The parcel goes to the Café Müller on Tuesday",
        "東京タワーで会いましょう",
        "party time 🎉 tonight",
        "nothing relevant here",
    )
    assert [h["seq"] for h in (await actor.search("cafe muller"))["hits"]] == [1]
    assert [h["seq"] for h in (await actor.search('"to the café"'))["hits"]] == [1]
    assert [h["seq"] for h in (await actor.search("タワー"))["hits"]] == [2]
    assert [h["seq"] for h in (await actor.search("東京"))["hits"]] == [2]
    assert [h["seq"] for h in (await actor.search("🎉"))["hits"]] == [3]
    hit = (await actor.search("tuesday"))["hits"][0]
    assert f"{SNIPPET_OPEN}Tuesday{SNIPPET_CLOSE}" in hit["snippet"]
    assert hit["session_id"] == sid and hit["action"] == "user_message"
    assert hit["in_context"] is True and hit["score"] > 0
    cjk = (await actor.search("タワー"))["hits"][0]["snippet"]
    assert f"{SNIPPET_OPEN}タワー{SNIPPET_CLOSE}" in cjk.replace(
        f"{SNIPPET_CLOSE}{SNIPPET_OPEN}", ""
    )


async def test_indexes_tool_calls_results_reasoning_and_system(actor: AgentActor) -> None:
    sid = await actor.create_session()
    events = [
        SessionEvent(action="system_instruction", content="always answer in zorblish"),
        SessionEvent(action="user_message", content="what is the weather"),
        SessionEvent(
            action="tool_call_request",
            tool_calls=[ToolCall(id="c1", name="get_forecast", arguments={"city": "Quimper"})],
            reasoning="the user wants meteorology",
        ),
        SessionEvent(
            action="tool_result", tool_call_id="c1", tool_name="get_forecast", content="drizzle"
        ),
    ]
    await actor.append_events(sid, events)
    for query, seq in [
        ("zorblish", 1),
        ("quimper", 3),
        ("get_forecast drizzle", 4),
        ("meteorology", 3),
    ]:
        assert [h["seq"] for h in (await actor.search(query))["hits"]] == [seq], query


async def test_no_query_text_is_an_error(actor: AgentActor) -> None:
    sid = await actor.create_session()
    await _say(actor, sid, 'he said "hello" AND NOT (x OR y) NEAR/3 col:* ^start')
    for query in [
        '"',
        '"""',
        "AND",
        "NOT x",
        "(",
        "col:value",
        "*",
        "^",
        "",
        "  ",
        "a:b:c",
        '"a"b"',
    ]:
        result = await actor.search(query)
        assert isinstance(result["hits"], list)
    assert [h["seq"] for h in (await actor.search("NOT (x"))["hits"]] == [1]


async def test_filters(actor: AgentActor) -> None:
    a = await actor.create_session()
    b = await actor.create_session()
    await _say(actor, a, "apple one", "apple two", "apple three")
    await _say(actor, b, "apple four")
    assert len((await actor.search("apple"))["hits"]) == 4
    assert {h["session_id"] for h in (await actor.search("apple", session_id=b))["hits"]} == {b}
    hits = (await actor.search("apple", session_id=a, after_seq=1, before_seq=3))["hits"]
    assert [h["seq"] for h in hits] == [2]
    assert len((await actor.search("apple", limit=2))["hits"]) == 2
    assert (await actor.search("apple", actions=["agent_message"]))["hits"] == []
    assert (await actor.search("apple", sessions=[b]))["hits"][0]["session_id"] == b
    assert (await actor.search("apple", session_id=a, sessions=[b]))["hits"] == []
    with pytest.raises(InvalidParamsError, match="limit"):
        await actor.search("apple", limit=0)
    with pytest.raises(InvalidParamsError, match="actions"):
        await actor.search("apple", actions=["shout"])


def _fts_rows(db: Path) -> int:
    conn = sqlite3.connect(db)
    try:
        return sum(indexed_rowids(conn).values())
    finally:
        conn.close()


async def test_deleted_popped_cleared_and_session_deleted_events_are_never_found(
    actor: AgentActor, tmp_path: Path
) -> None:
    sid = await actor.create_session()
    await _say(actor, sid, "secret alpha", "secret beta", "secret gamma", "secret delta")
    loaded = await actor.load_events(sid)
    assert await actor.delete_events(sid, [loaded[0].id]) == 1
    assert await actor.pop_event(sid) is not None
    assert sorted(h["seq"] for h in (await actor.search("secret"))["hits"]) == [2, 3]
    await actor.clear_session(sid)
    assert (await actor.search("secret"))["hits"] == []
    other = await actor.create_session()
    await _say(actor, other, "secret epsilon")
    assert await actor.delete_session(other)
    assert (await actor.search("secret"))["hits"] == []
    assert _fts_rows(_db(tmp_path)) == 0
    # Nothing of the erased text is left in the file or its WAL (secure_delete covers
    # the index's shadow tables; the delete truncated the WAL).
    data = _db(tmp_path).read_bytes()
    wal = _db(tmp_path).with_name("agent.sqlite-wal")
    if wal.exists():
        data += wal.read_bytes()
    for word in (b"alpha", b"delta", b"epsilon"):
        assert word not in data


async def test_in_context_is_false_after_a_summary(actor: AgentActor, tmp_path: Path) -> None:
    sid = await actor.create_session()
    for n in range(1, 7):
        ctx = await actor.build_working_context(sid)
        ctx.add_message(ContextMessage(role="user", content=f"turn {n} fact kumquat{n}"))
        ctx.add_message(ContextMessage(role="assistant", content=f"noted {n}"))
        await actor.persist_working_context(sid, ctx)
    report = await actor.compact(sid, strategy={"mode": "summarize", "raw_tail_turns": 2})
    assert report["compacted"] is True
    early = (await actor.search("kumquat1"))["hits"][0]
    late = (await actor.search("kumquat6"))["hits"][0]
    assert early["in_context"] is False and late["in_context"] is True
    # The summary cites its sources, and expand reads them back.
    events = await actor.load_events(sid, actions=["compaction"])
    record = events[-1].compaction
    assert record is not None
    episode = record["episodic"][-1]
    (source,) = episode["sources"]
    assert source["session_id"] == sid and source["from_seq"] == 1
    assert all(f.get("sources") for f in record["semantic"])
    # ... in the mirror too: an extra field of the reference layout's items
    await actor.mirror.drain()
    folder = tmp_path / "agents" / "agent" / "sessions" / sid
    mirrored = msgspec.json.decode((folder / "episodic.jsonl").read_bytes().splitlines()[-1])
    assert mirrored["sources"] == [source]
    if record["semantic"]:  # the offline summarizer may extract no fact (unit-tested)
        facts = (folder / "semantic.jsonl").read_bytes().splitlines()
        assert all(msgspec.json.decode(line)["sources"] for line in facts)
    expanded = await actor.expand(sid, source["from_seq"], source["to_seq"])
    assert expanded["events"][0]["content"] == "turn 1 fact kumquat1"
    assert expanded["messages"][0] == {"role": "user", "content": "turn 1 fact kumquat1"}
    assert [e["seq"] for e in expanded["events"]] == list(
        range(source["from_seq"], source["to_seq"] + 1)
    )
    assert len((await actor.expand(sid, 1, 100, limit=3))["events"]) == 3
    with pytest.raises(InvalidParamsError, match="to_seq"):
        await actor.expand(sid, 5, 2)
    with pytest.raises(NotFoundError):
        await actor.expand("nope", 1, 2)


def _make_v7_file(tmp_path: Path, events: int) -> Path:
    """An agent file as version 7 wrote it (the last without the index), with ``events``
    stored events."""
    db = _db(tmp_path)
    texts = [f"message {i} word{i % 97} lorem" for i in range(1, events + 1)]
    old_agent_file(db, 7, texts).close()
    return db


async def test_a_migrated_file_is_indexed_in_the_background(tmp_path: Path) -> None:
    _make_v7_file(tmp_path, 1_234)
    assert 7 in MIGRATIONS
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("agent")
        await actor.store()  # activation starts the backfill
        await actor.recall_settled()
        found = await actor.search("word5")
        assert found["indexing"] is False
        assert len(found["hits"]) == 10
        assert len((await actor.search("word5", limit=50))["hits"]) == len(
            [i for i in range(1, 1235) if i % 97 == 5]
        )
        # reindex rebuilds from scratch; meanwhile a search says it is indexing
        assert await actor.reindex() == 1_234
        await actor.recall_settled()
        assert (await actor.search("message 1234"))["hits"][0]["seq"] == 1234
        assert _fts_rows(_db(tmp_path)) == 1_234


async def test_a_search_during_the_backfill_says_indexing(tmp_path: Path) -> None:
    _make_v7_file(tmp_path, 3_000)
    async with ActorRegistry(tmp_path, idle_timeout=None, readonly=True) as reg:
        actor = await reg.get("agent")
        # Read-only: nobody builds the index; the search answers and says so.
        assert (await actor.search("lorem"))["indexing"] is True
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("agent")
        found = await actor.search("lorem")
        await actor.recall_settled()
        assert (await actor.search("lorem"))["indexing"] is False
        assert found["hits"] or found["indexing"]


async def test_events_written_by_a_plain_sqlite_client_are_indexed(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("agent")
        sid = await actor.create_session()
        await _say(actor, sid, "written by the server")
    conn = sqlite3.connect(_db(tmp_path), isolation_level=None)
    conn.execute(
        "INSERT INTO events(id, session_id, seq, action, content, created_at)"
        " VALUES ('hand', ?, 2, 'user_message', 'written by hand with sqlite3', 1)",
        (sid,),
    )
    conn.close()
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get("agent")
        await actor.store()  # activation indexes what waits in the queue
        await actor.recall_settled()
        found = await actor.search("hand")
        assert found["indexing"] is False and [h["seq"] for h in found["hits"]] == [2]
