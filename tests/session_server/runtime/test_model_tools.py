"""The model tools through ``memory.tools`` / ``memory.tool_call``'s local API: the recall
tools and the memory-block tools side by side, against a real agent file."""

from __future__ import annotations

import json
from pathlib import Path

from session_server.runtime.model_tools import MODEL_TOOLS
from session_server.runtime.registry import ActorRegistry

AGENT = "tooly"


def test_every_block_tool_is_offered_beside_the_recall_tools() -> None:
    assert {
        "recall_search",
        "recall_expand",
        "memory_block_set",
        "memory_block_append",
        "memory_block_replace",
    } <= set(MODEL_TOOLS)


async def test_a_block_tool_call_writes_a_model_revision_with_the_call_id(
    tmp_path: Path,
) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get(AGENT, create=True)
        sid = await actor.create_session(session_id="s1")
        await actor.set_block("human", "Name: Ada", max_tokens=200)
        offered = {t["function"]["name"] for t in actor.memory_tools("openai-chat")}
        assert {"memory_block_append", "recall_search"} <= offered
        done = await actor.tool_call(
            sid,
            "memory_block_append",
            json.dumps({"label": "human", "text": "Likes: tea"}),
            tool_call_id="call_7",
        )
        assert done["is_error"] is False, done
        latest = (await actor.block_history("human"))[0]
        assert latest.value == "Name: Ada\nLikes: tea"
        assert (latest.author, latest.tool_call_id) == ("model", "call_7")
        wrong = await actor.tool_call(
            sid, "memory_block_replace", {"label": "human", "old": "coffee", "new": "tea"}
        )
        assert wrong["is_error"] is True and wrong["content"].startswith("Error: ")
        assert len(await actor.block_history("human")) == 2
