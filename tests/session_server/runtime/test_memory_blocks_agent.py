"""A fake-model agent keeps a user-profile block up to date over 20 turns and two sessions.

The model is a small OpenAI-compatible server on 127.0.0.1 driven through the real
``openai`` package. It reads its instructions (where the server rendered the block),
learns one fact per turn and writes it with the block tools: appends new facts, replaces
a changed one, and once quotes text that is not in the block, gets the tool's error and
corrects itself. The block is the agent's, so the second session starts knowing what the
first learned.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from session_server.adapters import openai_chat
from session_server.events import ContextMessage
from session_server.runtime.actor import AgentActor
from session_server.runtime.registry import ActorRegistry
from session_server.values.block_tools import BLOCK_TOOLS
from tests.support.openai_server import FakeOpenAIServer, async_client

AGENT = "profile-keeper"
TOOLS = [{"type": "function", "function": tool} for tool in BLOCK_TOOLS]


def _said(n: int) -> str:
    """What the user says on turn ``n`` (1..20)."""
    changes = {
        2: "fact: city Paris",
        3: "fact: pet cat",
        12: "update: city Paris -> city Lyon",
        15: "update: pet cat -> pet dog",  # the model quotes wrongly first
    }
    return changes.get(n, f"fact: likes topic-{n}")


def _completion(message: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": "fake",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11},
    }


_CALL_IDS = itertools.count(1)


def _call(name: str, arguments: dict[str, str]) -> dict[str, Any]:
    return _completion(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": f"call_{next(_CALL_IDS)}",
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            ],
        }
    )


def model(path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """The fake model: one block edit per user message, then a short answer."""
    messages = body["messages"]
    last = messages[-1]
    if last["role"] == "tool":
        if "does not occur" in last["content"]:  # quoted wrongly: quote the block exactly
            fixed = {"label": "user_profile", "old": "pet cat", "new": "pet dog"}
            return 200, _call("memory_block_replace", fixed)
        return 200, _completion({"role": "assistant", "content": "Noted."})
    said = str(last["content"])
    if said.startswith("update: "):
        old, new = said.removeprefix("update: ").split(" -> ")
        if old == "pet cat":
            old = "pet: cat"  # a first, wrong quotation
        edit = {"label": "user_profile", "old": old, "new": new}
        return 200, _call("memory_block_replace", edit)
    fact = {"label": "user_profile", "text": said.removeprefix("fact: ")}
    return 200, _call("memory_block_append", fact)


async def _turn(actor: AgentActor, llm: Any, sid: str, n: int) -> str:
    ctx = await actor.build_working_context(sid, system_instructions=["You keep a profile."])
    turn = [ContextMessage(role="user", content=_said(n))]
    while True:
        ctx_messages = [*ctx.messages, *turn]
        payload = openai_chat.adapter.to_model_messages(ctx.system_instructions, ctx_messages)
        completion = await llm.chat.completions.create(model="fake", tools=TOOLS, **payload)
        answer = openai_chat.from_response(completion)
        turn.extend(answer)
        calls = answer[-1].tool_calls or ()
        for call in calls:
            content, is_error = await actor.run_block_tool(sid, call.name, call.arguments, call.id)
            turn.append(
                ContextMessage(
                    role="tool", tool_call_id=call.id, content=content, is_error=is_error
                )
            )
        if not calls:
            ctx.add_messages(turn)
            await actor.persist_working_context(sid, ctx)
            return str(answer[-1].content)


async def test_an_agent_keeps_a_profile_block_over_two_sessions(tmp_path: Path) -> None:
    with FakeOpenAIServer(model) as server:
        llm = async_client(server.base_url)
        async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
            actor = await reg.get(AGENT, create=True)
            await actor.set_block(
                "user_profile",
                "",
                description="What the user told you about themselves",
                max_tokens=400,
            )
            answers = []
            for n in range(1, 21):
                sid = "monday" if n <= 10 else "tuesday"
                if n in (1, 11):
                    await actor.create_session(session_id=sid)
                answers.append(await _turn(actor, llm, sid, n))
            profile = await actor.get_block("user_profile")
            history = await actor.block_history("user_profile")
        await llm.close()
    # Every fact is in the block, the changed ones changed.
    for n in range(1, 21):
        if n not in (2, 3, 12, 15):
            assert f"likes topic-{n}" in profile.value
    assert "city Lyon" in profile.value and "pet dog" in profile.value
    assert "city Paris" not in profile.value and "pet cat" not in profile.value
    # One revision per edit by the model (the client's first), each with its call's id.
    assert len(history) == 21
    assert {r.author for r in history[:-1]} == {"model"} and history[-1].author == "client"
    ids = [r.tool_call_id for r in history[:-1]]
    assert all(i and i.startswith("call_") for i in ids) and len(set(ids)) == 20
    assert answers == ["Noted."] * 20

    def first_request(n: int) -> str:
        body = next(
            r["body"]
            for r in server.requests
            if r["body"]["messages"][-1].get("content") == _said(n)
        )
        return str(body["messages"][0]["content"])

    # The second session began knowing what the first learned (the agent's block is in
    # its first request's instructions), and every turn saw the edits before it.
    assert "likes topic-10" in first_request(11) and "city Paris" in first_request(11)
    assert "city Lyon" in first_request(13)
    assert "[user_profile · " in first_request(20)
    # The wrong quotation came back as an error the model acted on.
    errors = [
        m
        for r in server.requests
        for m in r["body"]["messages"]
        if m["role"] == "tool" and "does not occur" in m["content"]
    ]
    assert errors
