"""Memory blocks through the local API (``AgentActor``), against real agent files."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from session_server.events import ContextMessage
from session_server.runtime.actor import AgentActor
from session_server.runtime.registry import ActorRegistry
from session_server.values.blocks import (
    MAX_BLOCKS_PER_SCOPE,
    MAX_SCOPE_TOKENS,
    MAX_VALUE_CHARS,
    usage_header,
)
from session_server.values.errors import ConflictError, InvalidParamsError, NotFoundError
from session_server.values.tokens import get_counter

AGENT = "blocky"


def _db(tmp: Path) -> Path:
    return tmp / "agents" / AGENT / "agent.sqlite"


async def _turn(actor: AgentActor, sid: str, q: str, a: str) -> None:
    ctx = await actor.build_working_context(sid)
    ctx.add_messages(
        [ContextMessage(role="user", content=q), ContextMessage(role="assistant", content=a)]
    )
    await actor.persist_working_context(sid, ctx)


async def _session(reg: ActorRegistry, sid: str = "s1") -> None:
    actor = await reg.get(AGENT, create=True)
    await actor.create_session(session_id=sid)
    await _turn(actor, sid, "hi", "hello")


async def test_set_get_history_revert_delete(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        await _session(reg)
        actor = await reg.get(AGENT)
        first = await actor.set_block(
            "human", "Name: Ada", description="Facts about the user", max_tokens=100, reason="intro"
        )
        assert (first.revision, first.tokens) == (1, get_counter().count("Name: Ada"))
        assert first.session_id is None and first.author == "client"
        second = await actor.set_block("human", "Name: Ada Lovelace", expected_revision=1)
        # Description and limit carry over from the previous revision.
        assert (second.revision, second.description, second.max_tokens) == (
            2,
            "Facts about the user",
            100,
        )
        with pytest.raises(ConflictError) as stale:
            await actor.set_block("human", "stale", expected_revision=1)
        assert stale.value.data == {"field": "expected_revision", "revision": 2}
        with pytest.raises(ConflictError):
            await actor.set_block("human", "new", expected_revision=0)  # must not exist
        assert (await actor.get_block("human")).value == "Name: Ada Lovelace"
        back = await actor.revert_block("human", 1)
        assert (back.revision, back.value, back.reason) == (3, "Name: Ada", "revert to revision 1")
        history = await actor.block_history("human")
        assert [r.revision for r in history] == [3, 2, 1]
        assert [r.reason for r in history] == ["revert to revision 1", None, "intro"]
        assert [
            r.revision for r in await actor.block_history("human", limit=1, before_revision=3)
        ] == [2]
        with pytest.raises(NotFoundError):
            await actor.revert_block("human", 9)
        assert await actor.delete_block("human") is True
        assert await actor.delete_block("human") is False
        with pytest.raises(NotFoundError):
            await actor.get_block("human")
        with pytest.raises(NotFoundError):
            await actor.block_history("human")
        # A new block of the same label starts again at revision 1.
        assert (await actor.set_block("human", "again", expected_revision=0)).revision == 1


async def test_refusals_name_the_field(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        await _session(reg)
        actor = await reg.get(AGENT)
        with pytest.raises(InvalidParamsError) as too_long:
            await actor.set_block("notes", "word " * 50, max_tokens=10)
        assert too_long.value.data is not None and too_long.value.data["field"] == "value"
        assert "past the block's max_tokens of 10" in too_long.value.message
        await actor.set_block("notes", "short", max_tokens=10)
        with pytest.raises(InvalidParamsError, match="max_tokens of 10"):
            await actor.set_block("notes", "word " * 50)  # the block's own limit
        for bad in ("", "has space", "x" * 65, "-dash-first"):
            with pytest.raises(InvalidParamsError) as exc:
                await actor.set_block(bad, "v")
            assert exc.value.data == {"field": "label"}
        with pytest.raises(InvalidParamsError) as exc:
            await actor.set_block("notes", "x" * (MAX_VALUE_CHARS + 1))
        assert exc.value.data == {"field": "value"}
        with pytest.raises(InvalidParamsError) as exc:
            await actor.set_block("notes", "v", max_tokens=0)
        assert exc.value.data == {"field": "max_tokens"}
        with pytest.raises(NotFoundError) as missing:
            await actor.set_block("notes", "v", session_id="nope")
        assert missing.value.data is not None and missing.value.data["field"] == "session_id"


async def test_blocks_per_scope_are_bounded(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        await _session(reg)
        actor = await reg.get(AGENT)
        for n in range(MAX_BLOCKS_PER_SCOPE):
            await actor.set_block(f"b{n}", "v", session_id="s1")
        with pytest.raises(InvalidParamsError, match="delete one first"):
            await actor.set_block("one-more", "v", session_id="s1")
        await actor.set_block("b0", "a new revision is fine", session_id="s1")
        await actor.set_block("agent-scope-is-apart", "v")
        # Tokens of a scope's blocks together: the next block past the total is refused.
        word = "lorem " * 2000
        per_block = get_counter().count(word)
        n = 0
        with pytest.raises(InvalidParamsError, match="together") as exc:
            while n * per_block <= MAX_SCOPE_TOKENS:
                await actor.set_block(f"big{n}", word, max_tokens=per_block)
                n += 1
        assert exc.value.data is not None and exc.value.data["field"] == "value"


async def test_build_renders_blocks_stably_and_after_a_write(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        await _session(reg)
        actor = await reg.get(AGENT)
        await actor.set_block("persona", "I am a helpful bot.", description="Who you are")
        await actor.set_block("task", "Fix the bug", session_id="s1", max_tokens=1100)
        prefixes = set()
        for _ in range(100):
            ctx = await actor.build_working_context("s1", system_instructions=["You are kind."])
            prefixes.add("\n".join(ctx.system_instructions))
        assert len(prefixes) == 1
        (system,) = prefixes
        assert system.startswith("You are kind.\n<memory_blocks>")
        assert system.index("[persona ·") < system.index("[task ·")  # agent, then session
        task = await actor.get_block("task", "s1")
        assert usage_header(task) in system
        assert "(Who you are)\nI am a helpful bot." in system
        # The context's token count includes the blocks.
        bare = await actor.build_working_context("s1", system_instructions=["You are kind."])
        assert bare.token_count is not None and bare.token_count > get_counter().count(system)
        await actor.set_block("task", "Fix the other bug", session_id="s1")
        after = await actor.build_working_context("s1", system_instructions=["You are kind."])
        assert "Fix the other bug" in after.system_instructions[1]
        assert "Fix the bug\n" not in after.system_instructions[1]
        # Another session sees the agent's blocks, not s1's.
        await _session(reg, "s2")
        other = await actor.build_working_context("s2")
        assert (
            "persona" in other.system_instructions[0]
            and "[task" not in other.system_instructions[0]
        )
        await actor.delete_block("persona")
        await actor.delete_block("task", "s1")
        assert (await actor.build_working_context("s1")).system_instructions == []


async def test_blocks_come_before_the_summary_memory(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        await _session(reg)
        actor = await reg.get(AGENT)
        for n in range(3):
            await _turn(actor, "s1", f"q{n}", f"a{n}")
        await actor.compact("s1", strategy={"mode": "summarize", "raw_tail_turns": 1})
        await actor.set_block("persona", "bot")
        ctx = await actor.build_working_context("s1", system_instructions=["sys"])
        assert ctx.system_instructions[0] == "sys"
        assert ctx.system_instructions[1].startswith("<memory_blocks>")
        assert len(ctx.system_instructions) == 3  # the summary memory last


async def test_a_strategy_pins_the_blocks_a_session_sees(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        await _session(reg)
        actor = await reg.get(AGENT)
        await actor.set_block("persona", "bot")
        await actor.set_block("secret", "hidden from s1")
        await actor.set_strategy({"blocks": ["persona"]}, "s1")
        text = (await actor.build_working_context("s1")).system_instructions[0]
        assert "[persona" in text and "secret" not in text
        per_request = await actor.build_working_context("s1", strategy={"blocks": []})
        assert per_request.system_instructions == []
        with pytest.raises(InvalidParamsError, match="blocks"):
            await actor.set_strategy({"blocks": [""]}, "s1")


async def test_blocks_survive_a_restart_and_go_with_their_session(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        await _session(reg)
        actor = await reg.get(AGENT)
        await actor.set_block("task", "remember me", session_id="s1")
        await actor.set_block("persona", "bot")
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get(AGENT)
        ctx = await actor.build_working_context("s1")
        assert "remember me" in ctx.system_instructions[0]
        await actor.delete_session("s1")
        assert [b.label for b in (await actor.list_blocks()).agent] == ["persona"]
    with sqlite3.connect(_db(tmp_path)) as conn:
        assert conn.execute(
            "SELECT COUNT(*) FROM memory_blocks WHERE session_id = 's1'"
        ).fetchone() == (0,)


async def test_a_deleted_block_leaves_no_trace_in_the_files(tmp_path: Path) -> None:
    secret = "the launch code is ZEBRA-7731"
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        await _session(reg)
        actor = await reg.get(AGENT)
        await actor.set_block("codes", secret, session_id="s1")
        await actor.set_block("codes", secret + " (confirmed)", session_id="s1")
        await actor.build_working_context("s1")
        await _turn(actor, "s1", "q", "a")  # its instructions held the block
        await actor.mirror_settled()
        assert await actor.delete_block("codes", "s1")
        await actor.mirror_settled()
        folder = _db(tmp_path).parent
        files = [p for p in folder.rglob("*") if p.is_file()]
        assert any(p.name == "working_context_snapshot.json" for p in files)
        for path in files:
            assert b"ZEBRA-7731" not in path.read_bytes(), path


async def test_model_tools_edit_blocks_with_author_and_call_id(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        await _session(reg)
        actor = await reg.get(AGENT)
        await actor.set_block("profile", "Name: Ada", session_id="s1", max_tokens=50)
        content, err = await actor.run_block_tool(
            "s1", "memory_block_append", {"label": "profile", "text": "Likes: tea"}, "call_1"
        )
        assert not err and "revision 2" in content
        content, err = await actor.run_block_tool(
            "s1",
            "memory_block_replace",
            {"label": "profile", "old": "tea", "new": "coffee"},
            "call_2",
        )
        assert not err
        block = await actor.get_block("profile", "s1")
        assert block.value == "Name: Ada\nLikes: coffee"
        assert (block.author, block.tool_call_id) == ("model", "call_2")
        content, err = await actor.run_block_tool(
            "s1", "memory_block_replace", {"label": "profile", "old": "tea", "new": "x"}
        )
        assert err and "does not occur" in content
        content, err = await actor.run_block_tool(
            "s1", "memory_block_set", {"label": "nope", "value": "x"}
        )
        assert err and "'profile'" in content
        content, err = await actor.run_block_tool(
            "s1", "memory_block_set", {"label": "profile", "value": "word " * 80}
        )
        assert err and "limit of 50" in content
        assert (await actor.get_block("profile", "s1")).revision == 3  # errors wrote nothing
        with pytest.raises(NotFoundError):
            await actor.run_block_tool("ghost", "memory_block_set", {"label": "p", "value": "x"})
        # The session's revision records the session's last seq (fork/rewind points).
        history = await actor.block_history("profile", "s1")
        assert all(r.session_seq == 2 for r in history)


async def test_the_mirror_holds_blocks_jsonl_per_agent_and_session(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        await _session(reg)
        actor = await reg.get(AGENT)
        await actor.set_block("persona", "bot v1")
        await actor.set_block("persona", "bot v2")
        await actor.set_block("task", "ZEBRA-7731", session_id="s1")
        await actor.set_block("notes", "kept", session_id="s1")
        await actor.mirror_settled()
        agent_dir = _db(tmp_path).parent
        session_file = agent_dir / "sessions" / "s1" / "blocks.jsonl"
        agent_lines = [
            json.loads(line) for line in (agent_dir / "blocks.jsonl").read_text().splitlines()
        ]
        assert [(r["label"], r["revision"], r["value"]) for r in agent_lines] == [
            ("persona", 1, "bot v1"),
            ("persona", 2, "bot v2"),
        ]
        assert "ZEBRA-7731" in session_file.read_text()
        await actor.delete_block("task", "s1")
        # Gone from the mirror once the delete is answered.
        assert "ZEBRA-7731" not in session_file.read_text()
        assert [json.loads(x)["label"] for x in session_file.read_text().splitlines()] == ["notes"]
        await actor.delete_session("s1")
        assert not session_file.exists()
