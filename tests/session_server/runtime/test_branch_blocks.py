"""Session memory blocks across fork and rewind, through the local API on real files."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from session_server import ActorRegistry, AgentActor
from session_server.runtime.branch_blocks import drop_erased_lines
from session_server.storage.store import AgentStore
from session_server.values.events import ContextMessage

AGENT = "agent"
SYSTEM = ["You are kind."]


async def turn(actor: AgentActor, sid: str, n: int) -> int:
    """One user/assistant turn; the session's last seq after it."""
    ctx = await actor.build_working_context(sid)
    ctx.add_messages(
        [
            ContextMessage(role="user", content=f"question {n}"),
            ContextMessage(role="assistant", content=f"answer {n}"),
        ]
    )
    await actor.persist_working_context(sid, ctx)
    row = await actor.get_session(sid)
    assert row is not None
    return int(row["last_seq"])


async def system(actor: AgentActor, sid: str) -> list[str]:
    return (await actor.build_working_context(sid, system_instructions=SYSTEM)).system_instructions


async def values(actor: AgentActor, sid: str) -> dict[str, str]:
    return {b.label: b.value for b in (await actor.list_blocks(sid)).session}


def mirror_lines(tmp: Path, sid: str) -> list[dict[str, object]]:
    path = tmp / "agents" / AGENT / "sessions" / sid / "blocks.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
async def registry(tmp_path: Path) -> AsyncIterator[ActorRegistry]:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        yield reg


@pytest.fixture
async def actor(registry: ActorRegistry) -> AgentActor:
    actor = await registry.get(AGENT, create=True)
    await actor.create_session(session_id="s1")
    await actor.set_block("persona", "A calm bot.")  # an agent block: never forked nor rewound
    return actor


async def test_a_fork_renders_the_blocks_the_source_had_at_the_fork_point(
    actor: AgentActor, tmp_path: Path
) -> None:
    await turn(actor, "s1", 1)
    await actor.set_block("task", "Fix bug 1", session_id="s1", reason="first", max_tokens=300)
    at = await turn(actor, "s1", 2)
    then = await system(actor, "s1")
    await turn(actor, "s1", 3)  # a block written now belongs to this turn's last seq
    await actor.set_block("task", "Fix bug 2", session_id="s1")
    await actor.set_block("notes", "later", session_id="s1")
    now = await system(actor, "s1")

    fork = await actor.fork_session("s1", at_seq=at)
    assert await system(actor, fork.session_id) == then
    assert "Fix bug 1" in then[1] and "later" not in then[1]
    # The history up to the fork point comes along, authors and reasons kept.
    (copied,) = await actor.block_history("task", fork.session_id)
    (original,) = await actor.block_history("task", "s1", before_revision=2)
    assert copied.session_id == fork.session_id
    assert (copied.revision, copied.value, copied.author, copied.reason, copied.max_tokens) == (
        1,
        "Fix bug 1",
        "client",
        "first",
        300,
    )
    assert (copied.session_seq, copied.created_at) == (original.session_seq, original.created_at)
    # A full fork renders the source's current blocks; the two then diverge.
    whole = await actor.fork_session("s1")
    assert await system(actor, whole.session_id) == now
    await actor.set_block("task", "Fork's own task", session_id=whole.session_id)
    assert (await values(actor, "s1"))["task"] == "Fix bug 2"
    await actor.delete_block("notes", "s1")
    assert (await values(actor, whole.session_id))["notes"] == "later"
    await actor.mirror_settled()
    assert [(x["label"], x["value"]) for x in mirror_lines(tmp_path, fork.session_id)] == [
        ("task", "Fix bug 1")
    ]


async def test_a_rewind_restores_the_blocks_and_its_branch_keeps_the_new_ones(
    actor: AgentActor, tmp_path: Path
) -> None:
    await actor.set_block("task", "Fix bug 1", session_id="s1")
    at = await turn(actor, "s1", 1)
    then = await system(actor, "s1")
    await turn(actor, "s1", 2)
    await actor.set_block("task", "Fix bug 2", session_id="s1", description="The job")
    await actor.set_block("notes", "abandoned idea", session_id="s1")
    head = await system(actor, "s1")  # the cache now holds the new values

    result = await actor.rewind_session("s1", at)
    assert await system(actor, "s1") == then
    history = await actor.block_history("task", "s1")
    assert [r.revision for r in history] == [3, 2, 1]  # nothing rewritten
    restore = history[0]
    assert (restore.value, restore.description, restore.author, restore.reason) == (
        "Fix bug 1",
        "",
        "operator",
        f"rewind to seq {at}",
    )
    assert restore.session_seq == result.rewind_seq
    assert await values(actor, "s1") == {"task": "Fix bug 1"}  # notes did not exist then
    branch = result.branch_session_id
    assert branch is not None
    assert await system(actor, branch) == head
    assert await values(actor, branch) == {"task": "Fix bug 2", "notes": "abandoned idea"}
    await actor.mirror_settled()
    assert [(x["label"], x["revision"]) for x in mirror_lines(tmp_path, "s1")] == [
        ("task", 1),
        ("task", 2),
        ("task", 3),
    ]
    assert {x["label"] for x in mirror_lines(tmp_path, branch)} == {"task", "notes"}

    # A fork of the rewound session at a seq of the abandoned range sees the blocks as
    # they were at the rewind's point; a rewind of the branch (undo the undo) keeps them.
    inside = await actor.fork_session("s1", at_seq=at + 1)
    assert await values(actor, inside.session_id) == {"task": "Fix bug 1"}
    again = await actor.rewind_session(branch, at + 2)
    assert again.abandoned is None
    assert await values(actor, branch) == {"task": "Fix bug 2", "notes": "abandoned idea"}
    # Rewinding the branch to the common point gives the rewound session's blocks again.
    await actor.rewind_session(branch, at)
    assert await system(actor, branch) == then


async def test_a_rewind_with_erase_leaves_no_trace_of_the_abandoned_blocks(
    actor: AgentActor, tmp_path: Path
) -> None:
    await actor.set_block("task", "Fix bug 1", session_id="s1")
    at = await turn(actor, "s1", 1)
    then = await system(actor, "s1")
    await turn(actor, "s1", 2)
    await actor.set_block("task", "launch code ZEBRA-7731", session_id="s1")
    await actor.set_block("codes", "also ZEBRA-7731", session_id="s1")
    await turn(actor, "s1", 3)
    await system(actor, "s1")
    await actor.mirror_settled()

    result = await actor.rewind_session("s1", at, erase=True)
    assert result.branch_session_id is None
    assert await system(actor, "s1") == then
    # The revisions written after the point are gone; the one left is the head again.
    assert [(r.revision, r.value) for r in await actor.block_history("task", "s1")] == [
        (1, "Fix bug 1")
    ]
    assert await values(actor, "s1") == {"task": "Fix bug 1"}
    await actor.set_block("task", "next", session_id="s1")
    assert (await actor.get_block("task", "s1")).revision == 2
    await actor.mirror_settled()
    folder = tmp_path / "agents" / AGENT
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert any(p.name == "blocks.jsonl" for p in files)
    for path in files:
        assert b"ZEBRA-7731" not in path.read_bytes(), path


async def test_erased_revisions_leave_the_mirror_before_the_rewind_commits(
    actor: AgentActor, tmp_path: Path
) -> None:
    await actor.set_block("task", "kept", session_id="s1")
    at = await turn(actor, "s1", 1)
    await turn(actor, "s1", 2)
    await actor.set_block("task", "ZEBRA-7731", session_id="s1")
    await turn(actor, "s1", 3)  # inside the turn: the rewind's point moves to its start
    await actor.mirror_settled()

    async def first_step(store: AgentStore) -> None:
        await drop_erased_lines(actor.blocks, store, "s1", at + 1)

    await actor.run_write(first_step)  # the rewind's first step alone
    # Only the mirror changed: the file no longer holds the revision SQLite still has.
    assert [x["value"] for x in mirror_lines(tmp_path, "s1")] == ["kept"]
    assert (await actor.get_block("task", "s1")).value == "ZEBRA-7731"
    await actor.rewind_session("s1", at + 1, erase=True)
    assert (await actor.get_block("task", "s1")).value == "kept"
    await actor.mirror_settled()
    assert [x["value"] for x in mirror_lines(tmp_path, "s1")] == ["kept"]
