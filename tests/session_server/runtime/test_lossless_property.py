"""Property: export -> import -> export keeps everything SQLite holds about a session.

Sessions are generated with tool calls and results (failed ones too), reasoning, free-form
event metadata, system messages, session metadata and strategy, and compactions of both
kinds (``compact`` placeholders and ``summarize`` records), written through the actor
into real SQLite files. The session is exported, imported into another memory dir (the
"other machine"), and checked: ``events.load``, ``context.build`` and ``context.render``
(every adapter) give identical results, and exporting the import gives the same bytes,
file for file. ``new_ids`` gives a copy beside the original with the same content.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from session_server import ActorRegistry, adapters
from session_server.runtime.actor import AgentActor
from session_server.runtime.transfer import export_session, import_session
from session_server.values.context import WorkingContext
from session_server.values.errors import SessionServerError
from session_server.values.events import SessionEvent, ToolCall

AGENT = "agent-1"
SID = "s1"

text = st.text(max_size=10)
meta = st.none() | st.dictionaries(st.sampled_from(["k", "trace_id", "ü"]), text | st.integers())
reasoning = st.none() | text
turn = st.tuples(
    st.just("turn"),
    text,  # user text
    meta,
    st.lists(st.booleans(), min_size=1, max_size=2),  # one tool call per entry: did it succeed?
    st.sampled_from(["ok", "[1,2]", '{"a":1}', "", "a long tool output " * 4]),
    reasoning,
    text,  # final answer
)
step = st.one_of(
    turn,
    turn,
    turn,
    st.tuples(st.just("user"), text, meta, reasoning),  # a turn left open
    st.tuples(st.just("calls"), text, reasoning),  # a call never answered
    st.tuples(st.just("system"), text),
    st.tuples(st.just("compact"), st.integers(0, 1)),
    st.tuples(st.just("compact"), st.just(0)),
    st.tuples(st.just("summarize"), st.integers(0, 1)),
)
session_meta = st.none() | st.dictionaries(st.sampled_from(["title", "owner"]), text)
session_strategy = st.sampled_from(
    [None, {"mode": "compact", "compact_keep": 1}, {"mode": "summarize", "raw_tail_turns": 1}]
)


async def write_session(
    actor: AgentActor,
    steps: list[tuple[Any, ...]],
    metadata: dict[str, Any] | None,
    strategy: dict[str, Any] | None,
) -> None:
    await actor.create_session(metadata, SID)
    calls = 0
    for s in steps:
        kind = s[0]
        events: list[SessionEvent] = []
        if kind in ("turn", "user"):
            events.append(
                SessionEvent(action="user_message", content=s[1], metadata=s[2], reasoning=s[-1])
            )
        if kind == "turn":
            for ok in s[3]:
                calls += 1
                call = ToolCall(id=f"c{calls}", name=f"tool{calls % 2}", arguments={"q": calls})
                events.append(
                    SessionEvent(action="tool_call_request", tool_calls=[call], reasoning=s[5])
                )
                events.append(
                    SessionEvent(
                        action="tool_result",
                        content=s[4],
                        tool_call_id=call.id,
                        tool_name=call.name,
                        is_success=ok,
                    )
                )
            events.append(
                SessionEvent(
                    action="agent_message", content=s[6], reasoning=s[5], model="m", metadata=s[2]
                )
            )
        elif kind == "calls":
            calls += 1
            call = ToolCall(id=f"c{calls}", name="tool", arguments={})
            events.append(
                SessionEvent(
                    action="tool_call_request", content=s[1], reasoning=s[2], tool_calls=[call]
                )
            )
        elif kind == "system":
            events.append(SessionEvent(action="system_instruction", content=s[1]))
        elif kind == "compact":
            await actor.compact(
                SID,
                strategy={
                    "mode": "compact",
                    "compact_keep": s[1],
                    "compact_clear_tool_inputs": True,
                },
            )
        elif kind == "summarize":
            await actor.compact(SID, strategy={"mode": "summarize", "raw_tail_turns": s[1]})
        if events:
            await actor.append_events(SID, events)
    if strategy is not None:
        await actor.set_strategy(strategy, SID)


async def observe(actor: AgentActor, session_id: str) -> dict[str, Any]:
    """What a client sees: every event, the built context, every adapter's rendering."""
    events = await actor.load_events(session_id, limit=None, tail=False)
    built = await actor.build_working_context(session_id, system_instructions=["Be brief."])
    return {
        "events": msgspec.to_builtins(events),
        "session": await actor.get_session(session_id),
        "strategy": await actor.get_strategy(session_id),
        "context": {
            "messages": msgspec.to_builtins(built.messages),
            "system_instructions": list(built.system_instructions),
            "base_seq": built.base_seq,
            "token_count": built.token_count,
            "metadata": built.metadata,
        },
        "rendered": {name: render(name, built) for name in adapters.names()},
    }


def render(name: str, built: WorkingContext) -> Any:
    """The adapter's payload, or its refusal: either must be the same after the round trip."""
    try:
        return adapters.get(name).to_model_messages(built.system_instructions, built.messages)
    except SessionServerError as exc:
        return {"refused": exc.message}


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def without_ids(observed: dict[str, Any]) -> dict[str, Any]:
    events = [
        {k: v for k, v in e.items() if k not in ("id", "session_id")} for e in observed["events"]
    ]
    session = {k: v for k, v in observed["session"].items() if k != "id"}
    return {**observed, "events": events, "session": session}


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    steps=st.tuples(st.lists(turn, min_size=1, max_size=3), st.lists(step, max_size=10)).map(
        lambda parts: parts[0] + parts[1]
    ),
    metadata=session_meta,
    strategy=session_strategy,
)
async def test_export_import_export_is_lossless(
    steps: list[tuple[Any, ...]], metadata: dict[str, Any] | None, strategy: dict[str, Any] | None
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        async with ActorRegistry(root / "here") as here, ActorRegistry(root / "there") as there:
            source = await here.get(AGENT)
            await write_session(source, steps, metadata, strategy)
            first = await export_session(source, SID, root / "out1", progress=False)
            target = await there.get(AGENT)
            info = await import_session(target, first["folder"], progress=False)
            assert info["lossless"] and info["session_id"] == SID
            second = await export_session(target, SID, root / "out2", progress=False)
            assert files(Path(second["folder"])) == files(Path(first["folder"]))
            original = await observe(source, SID)
            kinds = {
                e["compaction"]["strategy"]
                for e in original["events"]
                if e["action"] == "compaction"
            }
            event(f"compactions: {sorted(kinds)}")
            event(
                f"system messages: {any(e['action'] == 'system_instruction' for e in original['events'])}"
            )
            assert await observe(target, SID) == original
            # A copy beside the original: fresh ids, the same content.
            copy = await import_session(source, first["folder"], new_ids=True, progress=False)
            assert copy["session_id"] != SID
            assert without_ids(await observe(source, copy["session_id"])) == without_ids(original)
