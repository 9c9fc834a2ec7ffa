"""Branches through the local API, on real files: fork, rewind, branches (issue 36)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from session_server import ActorRegistry, AgentActor
from session_server.values.context import WorkingContext
from session_server.values.errors import ConflictError, InvalidParamsError, NotFoundError
from session_server.values.events import ContextMessage, SessionEvent, ToolCall
from tests.support.mirror_check import expected_mirror, mirror_files

AGENT = "agent"


def add_turn(ctx: WorkingContext, n: int, *, big: bool = False) -> None:
    ctx.add_message(ContextMessage(role="user", content=f"question {n}"))
    ctx.add_message(
        ContextMessage(
            role="assistant",
            tool_calls=[ToolCall(id=f"call-{n}", name="lookup", arguments={"n": n})],
        )
    )
    output = f"big output {n} " * 40 if big else f"result {n}"
    ctx.add_message(
        ContextMessage(role="tool", tool_call_id=f"call-{n}", name="lookup", content=output)
    )
    ctx.add_message(ContextMessage(role="assistant", content=f"answer {n}"))


async def fill(actor: AgentActor, sid: str, turns: int, start: int = 1, big: bool = False) -> None:
    for n in range(start, start + turns):
        ctx = await actor.build_working_context(sid, limit=1)
        add_turn(ctx, n, big=big)
        await actor.persist_working_context(sid, ctx)


def rendered(ctx: WorkingContext) -> bytes:
    return msgspec.json.encode([ctx.system_instructions, ctx.messages])


def shape(events: list[SessionEvent]) -> list[tuple[int, str, str, int | None]]:
    return [(e.seq, e.action, e.content, e.turn) for e in events]


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[ActorRegistry]:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        yield reg


@pytest.fixture
async def actor(registry: ActorRegistry) -> AgentActor:
    return await registry.get(AGENT)


async def test_fork_at_head_has_the_whole_history_and_its_own_future(actor: AgentActor) -> None:
    sid = await actor.create_session(metadata={"user": "u1"})
    await fill(actor, sid, 3)
    before = await actor.build_working_context(sid)
    fork = await actor.fork_session(sid)
    assert (fork.parent_session_id, fork.fork_seq, fork.last_seq) == (sid, 12, 12)
    row = await actor.get_session(fork.session_id)
    assert row is not None
    assert row["parent_session_id"] == sid and row["fork_seq"] == 12
    assert row["metadata"] == {"user": "u1"} and row["last_seq"] == 12
    source_row = await actor.get_session(sid)
    assert source_row is not None
    assert source_row["parent_session_id"] is None and source_row["fork_seq"] is None
    assert rendered(await actor.build_working_context(fork.session_id)) == rendered(before)
    src_events = await actor.load_events(sid, limit=None)
    fork_events = await actor.load_events(fork.session_id, limit=None)
    assert shape(fork_events) == shape(src_events)
    # Nothing was copied: the fork reads the source's stored events, ids included.
    assert [e.id for e in fork_events] == [e.id for e in src_events]
    # They diverge: each one's writes stay on its branch, seqs continue at fork_seq + 1.
    await fill(actor, fork.session_id, 1, start=100)
    await fill(actor, sid, 1, start=200)
    fork_tail = await actor.load_events(fork.session_id, limit=4)
    src_tail = await actor.load_events(sid, limit=4)
    assert [e.seq for e in fork_tail] == [13, 14, 15, 16] == [e.seq for e in src_tail]
    assert fork_tail[0].content == "question 100" and fork_tail[0].turn == 4
    assert src_tail[0].content == "question 200"
    listed = {s["id"]: s for s in await actor.list_sessions()}
    assert listed[fork.session_id]["parent_session_id"] == sid


async def test_fork_at_a_seq_and_forks_of_forks(actor: AgentActor) -> None:
    sid = await actor.create_session()
    await fill(actor, sid, 2)
    at_8 = rendered(await actor.build_working_context(sid))
    await fill(actor, sid, 2, start=3)
    first = await actor.fork_session(sid, at_seq=8, new_session_id="f1", metadata={"k": 1})
    assert first.session_id == "f1" and first.last_seq == 8
    assert rendered(await actor.build_working_context("f1")) == at_8
    assert (await actor.get_session("f1") or {})["metadata"] == {"k": 1}
    second = await actor.fork_session("f1", at_seq=4)
    third = await actor.fork_session(second.session_id)
    events = await actor.load_events(third.session_id, limit=None)
    assert [e.content for e in events] == ["question 1", "", "result 1", "answer 1"]
    branches = await actor.session_branches(sid)
    assert [(b.session_id, b.fork_seq, b.kind) for b in branches] == [("f1", 8, "fork")]
    assert [b.session_id for b in await actor.session_branches("f1")] == [second.session_id]
    assert await actor.session_branches(third.session_id) == []


async def test_a_late_tool_result_in_a_fork_joins_the_turn_of_its_call(actor: AgentActor) -> None:
    sid = await actor.create_session()
    await fill(actor, sid, 2)
    fork = await actor.fork_session(sid, at_seq=6)  # after turn 2's tool call request
    result = SessionEvent(
        action="tool_result", content="late", tool_call_id="call-2", tool_name="lookup"
    )
    other = SessionEvent(action="system_instruction", content="note")
    await actor.append_events(fork.session_id, [other, result])
    events = await actor.load_events(fork.session_id, limit=2)
    assert [(e.seq, e.turn) for e in events] == [(7, 2), (8, 2)]


async def test_fork_refusals(actor: AgentActor) -> None:
    sid = await actor.create_session()
    await fill(actor, sid, 1)
    with pytest.raises(NotFoundError):
        await actor.fork_session("nope")
    with pytest.raises(InvalidParamsError, match="at_seq"):
        await actor.fork_session(sid, at_seq=5)
    with pytest.raises(InvalidParamsError, match="at_seq"):
        await actor.fork_session(sid, at_seq=-1)
    with pytest.raises(ConflictError, match="session_id"):
        await actor.fork_session(sid, new_session_id=sid)
    with pytest.raises(InvalidParamsError):
        await actor.fork_session(sid, new_session_id="a/b")
    assert [s["id"] for s in await actor.list_sessions()] == [sid]


async def test_deleting_the_source_leaves_its_forks_whole(actor: AgentActor) -> None:
    sid = await actor.create_session()
    await fill(actor, sid, 2)
    fork = await actor.fork_session(sid, at_seq=4)
    expected = rendered(await actor.build_working_context(fork.session_id))
    assert await actor.delete_session(sid) is True
    assert rendered(await actor.build_working_context(fork.session_id)) == expected
    row = await actor.get_session(fork.session_id)
    assert row is not None and row["parent_session_id"] == sid  # the lineage stays
    with pytest.raises(NotFoundError):
        await actor.session_branches(sid)


async def test_compaction_records_are_inherited_and_later_ones_stay_on_their_branch(
    actor: AgentActor,
) -> None:
    sid = await actor.create_session()
    strategy = {"mode": "compact", "compact_keep": 1}
    await actor.set_strategy(strategy, session_id=sid)
    await fill(actor, sid, 3, big=True)
    done = await actor.compact(sid)
    assert done["compacted"] is True
    before = await actor.build_working_context(sid)
    fork = await actor.fork_session(sid)
    assert rendered(await actor.build_working_context(fork.session_id)) == rendered(before)
    assert len(await actor.load_events(fork.session_id, actions=["compaction"])) == 1
    await fill(actor, fork.session_id, 2, start=4, big=True)
    assert (await actor.compact(fork.session_id))["compacted"] is True
    assert len(await actor.load_events(fork.session_id, actions=["compaction"])) == 2
    assert len(await actor.load_events(sid, actions=["compaction"])) == 1
    assert rendered(await actor.build_working_context(sid)) == rendered(before)


async def test_rewind_keeps_the_abandoned_tail_as_a_branch(actor: AgentActor) -> None:
    sid = await actor.create_session()
    await fill(actor, sid, 3)
    at_4 = await actor.fork_session(sid, at_seq=4)  # the context the rewind must give
    expected = rendered(await actor.build_working_context(at_4.session_id))
    head = rendered(await actor.build_working_context(sid))
    result = await actor.rewind_session(sid, 4, reason="bad plan")
    assert (result.to_seq, result.rewind_seq, result.moved_to_turn_start) == (4, 13, False)
    assert result.abandoned is not None
    assert (result.abandoned.from_seq, result.abandoned.to_seq) == (5, 12)
    branch = result.branch_session_id
    assert branch is not None
    assert rendered(await actor.build_working_context(sid)) == expected
    assert [e.seq for e in await actor.load_events(sid, limit=None)] == [1, 2, 3, 4]
    # The abandoned turns are a branch whose history is the old head: undo can be undone.
    assert rendered(await actor.build_working_context(branch)) == head
    kinds = [(b.session_id, b.fork_seq, b.kind) for b in await actor.session_branches(sid)]
    assert kinds == [(at_4.session_id, 4, "fork"), (branch, 4, "rewind")]
    row = await actor.get_session(sid)
    assert row is not None and row["last_seq"] == 13
    # Seqs are never reused; the next turn is turn 2 of this history.
    await fill(actor, sid, 1, start=9)
    tail = await actor.load_events(sid, limit=4)
    assert [(e.seq, e.turn) for e in tail] == [(14, 2), (15, 2), (16, 2), (17, 2)]
    # The moved events kept their ids: the branch holds what the source held.
    branch_events = await actor.load_events(branch, limit=None)
    assert [e.seq for e in branch_events] == list(range(1, 13))


async def test_a_rewind_inside_a_turn_moves_to_its_start(actor: AgentActor) -> None:
    sid = await actor.create_session()
    await fill(actor, sid, 3)
    result = await actor.rewind_session(sid, 6)  # turn 2 is seqs 5..8
    assert (result.requested_to_seq, result.to_seq, result.moved_to_turn_start) == (6, 4, True)
    assert [e.seq for e in await actor.load_events(sid, limit=None)] == [1, 2, 3, 4]
    # Rewinding to a user message keeps no half turn either.
    again = await actor.rewind_session(sid, 1)
    assert (again.to_seq, again.moved_to_turn_start, again.rewind_seq) == (0, True, 14)
    assert await actor.load_events(sid, limit=None) == []


async def test_rewind_with_erase_leaves_no_trace(tmp_path: Path) -> None:
    registry = ActorRegistry(tmp_path, idle_timeout=None)
    actor = await registry.get(AGENT)
    sid = await actor.create_session()
    await fill(actor, sid, 1)
    ctx = await actor.build_working_context(sid)
    ctx.add_message(ContextMessage(role="user", content="SECRET-abandoned-7f3a"))
    ctx.add_message(ContextMessage(role="assistant", content="SECRET-answer-7f3a"))
    await actor.persist_working_context(sid, ctx)
    result = await actor.rewind_session(sid, 4, erase=True)
    assert result.branch_session_id is None and result.erased == 2
    assert result.abandoned is not None and result.abandoned.from_seq == 5
    assert await actor.session_branches(sid) == []
    await actor.mirror_settled()
    events = await actor.load_events(sid, limit=None)
    assert mirror_files(tmp_path, AGENT, sid) == expected_mirror(events)
    await registry.close()
    agent_dir = tmp_path / "agents" / AGENT
    for path in agent_dir.rglob("*"):
        if path.is_file():
            assert b"SECRET" not in path.read_bytes(), path


async def test_rewind_across_a_compaction_drops_its_memory(actor: AgentActor) -> None:
    sid = await actor.create_session()
    await fill(actor, sid, 4)
    before = rendered(await actor.build_working_context(sid, strategy={"mode": "compact"}))
    out = await actor.compact(sid, strategy={"mode": "summarize", "raw_tail_turns": 1})
    assert out["compacted"] is True
    summarized = await actor.build_working_context(sid)
    assert any("[MEMORY:EPISODIC]" in s for s in summarized.system_instructions or [])
    result = await actor.rewind_session(sid, 16)  # the compaction record is seq 17
    assert result.abandoned is not None and result.abandoned.from_seq == 17
    after = await actor.build_working_context(sid, strategy={"mode": "compact"})
    assert not any("[MEMORY" in s for s in after.system_instructions or [])
    assert rendered(after) == before
    assert result.branch_session_id is not None
    branch = await actor.build_working_context(result.branch_session_id)
    assert any("[MEMORY:EPISODIC]" in s for s in branch.system_instructions or [])


async def test_rewind_refusals_and_a_rewind_with_nothing_to_abandon(actor: AgentActor) -> None:
    sid = await actor.create_session()
    await fill(actor, sid, 1)
    with pytest.raises(NotFoundError):
        await actor.rewind_session("nope", 0)
    with pytest.raises(InvalidParamsError, match="to_seq"):
        await actor.rewind_session(sid, 5)
    with pytest.raises(InvalidParamsError, match="reason"):
        await actor.rewind_session(sid, 4, reason="x" * 5000)
    result = await actor.rewind_session(sid, 4)
    assert result.abandoned is None and result.branch_session_id is None
    assert result.rewind_seq == 5
    assert len(await actor.load_events(sid, limit=None)) == 4


async def test_mirror_folders_follow_forks_and_rewinds(tmp_path: Path) -> None:
    registry = ActorRegistry(tmp_path, idle_timeout=None)
    actor = await registry.get(AGENT)
    sid = await actor.create_session()
    await fill(actor, sid, 3)
    fork = await actor.fork_session(sid, at_seq=8)
    rewound = await actor.rewind_session(sid, 4)
    await actor.mirror_settled()
    for session in (sid, fork.session_id, rewound.branch_session_id):
        assert session is not None
        events = await actor.load_events(session, limit=None)
        assert mirror_files(tmp_path, AGENT, session) == expected_mirror(events), session
    # Reopened: activation finds every mirror current.
    await registry.close()
    async with ActorRegistry(tmp_path, idle_timeout=None) as again:
        reopened = await again.get(AGENT)
        events = await reopened.load_events(sid, limit=None)
        assert [e.seq for e in events] == [1, 2, 3, 4]
        assert mirror_files(tmp_path, AGENT, sid) == expected_mirror(events)


async def test_rewinds_are_told_to_subscribers(actor: AgentActor) -> None:
    sid = await actor.create_session()
    await fill(actor, sid, 2)
    seen: list[tuple[int, int]] = []
    unsubscribe = actor.subscribe(
        sid, lambda events: None, on_rewound=lambda a, b: seen.append((a, b))
    )
    await actor.rewind_session(sid, 4)
    unsubscribe()
    await actor.rewind_session(sid, 0)
    assert seen == [(4, 9)]


async def test_the_rewind_row_records_what_it_did(actor: AgentActor, tmp_path: Path) -> None:
    sid = await actor.create_session()
    await fill(actor, sid, 2)
    result = await actor.rewind_session(sid, 4, reason="retry")
    conn = sqlite3.connect(tmp_path / "agents" / AGENT / "agent.sqlite")
    try:
        row = conn.execute(
            "SELECT seq, to_seq, abandoned_from, abandoned_to, branch_session_id, erased, reason"
            " FROM rewinds WHERE session_id = ?",
            (sid,),
        ).fetchall()
    finally:
        conn.close()
    assert row == [(9, 4, 5, 8, result.branch_session_id, 0, "retry")]
    assert json.loads(json.dumps(result.to_builtins()))["abandoned"] == {"from_seq": 5, "to_seq": 8}
    # Deleting the session deletes its rewinds (their reasons are the caller's text).
    assert await actor.delete_session(sid)
    conn = sqlite3.connect(tmp_path / "agents" / AGENT / "agent.sqlite")
    try:
        assert conn.execute("SELECT count(*) FROM rewinds").fetchone() == (0,)
    finally:
        conn.close()
