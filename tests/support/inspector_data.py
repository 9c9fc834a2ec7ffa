"""Real data for the Memory Inspector's browser tests and screenshots.

- ``import_reference(url)``: every agent folder of the reference fixtures
  (``shared/fixtures/reference-memory``) imported with ``import.session`` into an agent of
  the same id; returns the agent ids.
- ``seed_live_agent(url)``: agent ``LIVE_AGENT`` with session ``LIVE_SESSION`` built the way
  an agent loop builds it: turns persisted with ``turn.persist`` (tool calls, one long tool
  output), a ``summarize`` compaction (episodic and semantic memory), more turns, then a
  ``compact`` compaction (placeholders for the older tool outputs of the tail), and a tool
  call whose result was never recorded (the build answers it with a synthetic result).
- ``persist_turn(url, n)``: one more turn in the live session (what a running agent does
  while the page is open).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from session_server.client import SessionClient
from session_server.values.events import ContextMessage, ToolCall

from .server import turn_messages

__all__ = [
    "LIVE_AGENT",
    "LIVE_SESSION",
    "REFERENCE",
    "import_reference",
    "persist_turn",
    "seed_live_agent",
]


def _reference() -> Path:
    """``shared/fixtures/reference-memory`` beside the checkout (main or a worktree)."""
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "shared" / "fixtures" / "reference-memory"
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError("shared/fixtures/reference-memory not found above the checkout")


REFERENCE = _reference()
LIVE_AGENT = "support-bot"
LIVE_SESSION = "live-session"


async def import_reference(url: str, token: str | None = None) -> list[str]:
    """Import each reference agent folder into the agent of the same id."""
    agents: list[str] = []
    for folder in sorted((REFERENCE / "agents").iterdir()):
        if not folder.is_dir():
            continue
        files = {p.name: p.read_text(encoding="utf-8") for p in folder.iterdir() if p.is_file()}
        async with SessionClient(url, folder.name, token=token) as client:
            await client.call("import.session", {"files": files})
        agents.append(folder.name)
    return agents


def _lookup_turn(n: int, topic: str, output: str, preface: str = "") -> list[ContextMessage]:
    call_id = f"call-{n}"
    return [
        ContextMessage(role="user", content=f"{preface}What do we know about {topic}?"),
        ContextMessage(
            role="assistant",
            content="Let me look that up.",
            tool_calls=[
                ToolCall(id=call_id, name="search_docs", arguments={"query": topic, "k": 3})
            ],
        ),
        ContextMessage(role="tool", content=output, tool_call_id=call_id, name="search_docs"),
        ContextMessage(role="assistant", content=f"Here is what the docs say about {topic}."),
    ]


async def seed_live_agent(url: str, token: str | None = None) -> dict[str, Any]:
    """Build the live session; answers the two compaction results."""
    long_output = "\n".join(
        f"{i:03d} | order #{1000 + i} | shipped | tracking ZX{i:05d}" for i in range(1, 121)
    )
    turns = [
        _lookup_turn(
            1,
            "refund windows",
            "Refunds are accepted within 30 days of delivery.",
            "My name is Ada and I prefer short answers. ",
        ),
        _lookup_turn(
            2,
            "shipping to Norway",
            "Shipping to Norway takes 3-5 business days.",
            "Please use metric units. ",
        ),
        _lookup_turn(3, "the order history of customer 42", long_output),
        _lookup_turn(4, "gift cards", "Gift cards never expire and cannot be refunded."),
        _lookup_turn(5, "warranty claims", "Warranty claims need the order number and a photo."),
    ]
    async with SessionClient(url, LIVE_AGENT, token=token) as client:
        await client.create_session(
            session_id=LIVE_SESSION, metadata={"user": "customer-42", "channel": "web"}
        )
        for messages in turns[:3]:
            await client.persist_turn(LIVE_SESSION, messages)
        summarize = await client.call(
            "memory.compact",
            {"session_id": LIVE_SESSION, "strategy": {"mode": "summarize", "raw_tail_turns": 1}},
        )
        for messages in turns[3:]:
            await client.persist_turn(LIVE_SESSION, messages)
        compact = await client.call(
            "memory.compact",
            {"session_id": LIVE_SESSION, "strategy": {"mode": "compact", "compact_keep": 1}},
        )
        # A call that never got its result (the agent was stopped): the build repairs it.
        email = ToolCall(id="call-email", name="send_email", arguments={"to": "ada@example.com"})
        await client.persist_turn(
            LIVE_SESSION,
            [
                ContextMessage(role="user", content="Email me the summary."),
                ContextMessage(role="assistant", content="", tool_calls=[email]),
            ],
        )
        await client.persist_turn(
            LIVE_SESSION,
            [
                ContextMessage(role="user", content="Never mind the email."),
                ContextMessage(role="assistant", content="Understood, no email."),
            ],
        )
    return {"compact": compact, "summarize": summarize}


async def persist_turn(url: str, n: int, token: str | None = None) -> None:
    """One more turn (user, tool call, tool result, answer) in the live session."""
    async with SessionClient(url, LIVE_AGENT, token=token) as client:
        await client.persist_turn(LIVE_SESSION, turn_messages(n))
