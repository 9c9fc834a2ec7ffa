"""``SessionServerSession`` with the real OpenAI Agents SDK.

``Runner.run`` drives an agent with a tool against a scripted fake Responses API server on
127.0.0.1 for 30+ turns: parallel function calls, reasoning items (with encrypted
content), hosted web-search calls and multi-part messages. The same script runs on the
SDK's own ``SQLiteSession``; without a strategy both give the same items after every turn,
remote and local, across a server restart. Under ``compact`` and ``summarize`` the items
stay valid (the fake model refuses unpaired calls) and the history stays bounded.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import (
    Agent,
    OpenAIResponsesModel,
    Runner,
    SQLiteSession,
    function_tool,
    set_tracing_disabled,
)
from agents.memory import Session, SessionSettings

from session_server.client import SessionClient
from session_server.integrations import openai_agents
from session_server.integrations.openai_agents import SessionServerSession
from session_server.runtime.registry import ActorRegistry
from session_server.values.errors import InvalidParamsError, SessionServerError
from tests.support.openai_server import FakeOpenAIServer, async_client, response_payload
from tests.support.server import RestartableServer, ServerProcess, free_port

set_tracing_disabled(True)  # no trace export: the only network is 127.0.0.1

TURNS = 30
RESTART_AT = 15
AGENT = "sdk-agent"
PLACEHOLDER = "⟦removed: tool output for get_weather"


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"{city}: sunny, {len(city) * 3} C"


def _turn_number(text: str) -> int:
    return int(text.rsplit(" ", 1)[1])


def _check_items(items: list[dict[str, Any]]) -> str | None:
    """What makes ``items`` an invalid Responses input (unpaired calls), or ``None``."""
    calls: list[str] = []
    outputs: set[str] = set()
    for item in items:
        if item.get("type") == "function_call":
            calls.append(item["call_id"])
        elif item.get("type") == "function_call_output":
            if item["call_id"] not in calls:
                return f"output {item['call_id']} has no call before it"
            outputs.add(item["call_id"])
    missing = [c for c in calls if c not in outputs]
    return f"calls without output: {missing}" if missing else None


def scripted_model(path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """A deterministic model: its answer depends only on the request's input items."""
    items = body.get("input") or []
    problem = _check_items(items)
    if problem is not None:
        return 400, {"error": {"message": problem, "type": "invalid_request_error"}}
    users = [i for i in items if i.get("role") == "user"]
    text = users[-1]["content"] if isinstance(users[-1]["content"], str) else "turn 0"
    k = _turn_number(text)
    tokens = len(json.dumps(items)) // 4
    reasoning = {
        "type": "reasoning",
        "id": f"rs_{k}_{items[-1].get('type', 'message')}",
        "summary": [{"type": "summary_text", "text": f"thinking about turn {k}"}],
        "encrypted_content": f"enc-{k}",
    }
    if items[-1].get("type") == "function_call_output":
        outputs = [i["output"] for i in items if i.get("type") == "function_call_output"][-2:]
        answer = {
            "type": "message", "id": f"msg_{k}_a", "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": f"answer {k}: {'; '.join(outputs)}",
                         "annotations": []}],
        }  # fmt: skip
        return 200, response_payload(body, [reasoning, answer], input_tokens=tokens)
    if k % 3 == 0:  # two parallel calls
        calls = [
            {"type": "function_call", "id": f"fc_{k}_{j}", "call_id": f"call_{k}_{j}",
             "name": "get_weather", "arguments": json.dumps({"city": city}), "status": "completed"}
            for j, city in enumerate(("Paris", "Rome"))
        ]  # fmt: skip
        return 200, response_payload(body, [reasoning, *calls], input_tokens=tokens)
    output: list[dict[str, Any]] = [reasoning]
    if k % 3 == 1:
        output.append({"type": "web_search_call", "id": f"ws_{k}", "status": "completed",
                       "action": {"type": "search", "query": f"q{k}"}})  # fmt: skip
    output.append(
        {"type": "message", "id": f"msg_{k}", "status": "completed", "role": "assistant",
         "content": [{"type": "output_text", "text": f"plain {k}", "annotations": []},
                     {"type": "output_text", "text": " (two parts)", "annotations": []}]}
    )  # fmt: skip
    return 200, response_payload(body, output, input_tokens=tokens)


@pytest.fixture(scope="module")
def fake_model() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(scripted_model) as server:
        yield server


def make_agent(server: FakeOpenAIServer) -> Agent[Any]:
    client = async_client(server.base_url)
    return Agent(
        name="assistant",
        instructions="Be brief.",
        tools=[get_weather],
        model=OpenAIResponsesModel(model="test-model", openai_client=client),
    )


async def drive(
    agent: Agent[Any],
    session: Session,
    turns: range,
    *,
    hooks: Any = None,
) -> list[list[Any]]:
    """Run the turns; the session's items after each one."""
    seen = []
    for k in turns:
        result = await Runner.run(agent, f"turn {k}", session=session, hooks=hooks)
        assert str(result.final_output).startswith(("answer", "plain")), result.final_output
        seen.append(await session.get_items())
    return seen


@pytest.fixture(scope="module")
def reference(fake_model: FakeOpenAIServer) -> list[list[Any]]:
    """The items after each turn with the SDK's own SQLiteSession."""

    async def run() -> list[list[Any]]:
        session = SQLiteSession("reference")
        try:
            return await drive(make_agent(fake_model), session, range(1, TURNS + 1))
        finally:
            session.close()

    return asyncio.run(run())


async def test_reference_run_has_every_item_kind(reference: list[list[Any]]) -> None:
    kinds = {item.get("type", "message") for item in reference[-1]}
    assert {"reasoning", "function_call", "function_call_output", "web_search_call"} <= kinds
    assert len(reference[-1]) > 4 * TURNS


async def test_remote_without_strategy_matches_sqlite_across_restart(
    tmp_path: Path, fake_model: FakeOpenAIServer, reference: list[list[Any]]
) -> None:
    agent = make_agent(fake_model)
    async with RestartableServer(tmp_path / "memory") as server:
        session = SessionServerSession("user-1", url=server.url, agent_id=AGENT)
        try:
            seen = await drive(agent, session, range(1, RESTART_AT))
            await server.restart()
            seen += await drive(agent, session, range(RESTART_AT, TURNS + 1))
        finally:
            await session.aclose()
        assert server.starts == 2
    for k, (mine, theirs) in enumerate(zip(seen, reference, strict=True), start=1):
        assert mine == theirs, f"turn {k} differs"


async def test_local_without_strategy_matches_sqlite_across_restart(
    tmp_path: Path, fake_model: FakeOpenAIServer, reference: list[list[Any]]
) -> None:
    agent = make_agent(fake_model)
    seen: list[list[Any]] = []
    for turns in (range(1, RESTART_AT), range(RESTART_AT, TURNS + 1)):  # two processes' lives
        async with ActorRegistry(tmp_path / "memory") as registry:
            session = SessionServerSession("user-1", registry=registry, agent_id=AGENT)
            seen += await drive(agent, session, turns)
    assert seen == reference


@pytest.mark.parametrize("where", ["remote", "local"])
@pytest.mark.parametrize(
    ("strategy", "marker"),
    [
        ({"mode": "compact", "compact_keep": 2, "compact_trigger_turns": 3}, PLACEHOLDER),
        (
            {
                "mode": "summarize",
                "raw_tail_turns": 3,
                "max_context_tokens": 3000,
                "max_output_tokens": 200,
                "safety_margin_tokens": 100,
            },
            "[MEMORY:EPISODIC]",
        ),
    ],
    ids=["compact", "summarize"],
)
async def test_strategies_keep_history_valid_and_bounded(
    tmp_path: Path,
    fake_model: FakeOpenAIServer,
    reference: list[list[Any]],
    where: str,
    strategy: dict[str, Any],
    marker: str,
) -> None:
    agent = make_agent(fake_model)
    requests_before = len(fake_model.requests)
    async with RestartableServer(tmp_path / "memory") as server:

        def open_session() -> SessionServerSession:
            if where == "remote":
                return SessionServerSession(
                    "user-1", url=server.url, agent_id=AGENT, strategy=strategy
                )
            assert server.registry is not None
            return SessionServerSession(
                "user-1", registry=server.registry, agent_id=AGENT, strategy=strategy
            )

        session = open_session()
        seen = await drive(agent, session, range(1, RESTART_AT), hooks=session.usage_hooks())
        await server.restart()
        if where == "local":
            session = open_session()  # the old registry is gone with the "process"
        seen += await drive(
            agent, session, range(RESTART_AT, TURNS + 1), hooks=session.usage_hooks()
        )
        await session.aclose()
        async with SessionClient(server.url, AGENT) as client:
            events = await client.load_events("user-1", limit=None)
    # Every request the SDK built from these items was accepted by the model.
    statuses = [r for r in fake_model.requests[requests_before:] if r["path"] == "/v1/responses"]
    assert len(statuses) > TURNS
    assert all(_check_items(items) is None for items in seen)
    assert any(marker in json.dumps(items, ensure_ascii=False) for items in seen[-5:])
    if strategy["mode"] == "summarize":  # older turns are behind the memory block
        assert seen[-1][0]["role"] == "system" and marker in seen[-1][0]["content"]
        assert len(json.dumps(seen[-1])) < len(json.dumps(reference[-1])) / 2
    else:  # every turn stays, old tool outputs are placeholders
        outputs = [i for i in seen[-1] if i.get("type") == "function_call_output"]
        assert outputs[0]["output"].startswith(marker) and marker not in outputs[-1]["output"]
    assert any(e.action == "compaction" for e in events)
    # Raw history is complete in storage whatever the strategy shows.
    assert sum(1 for e in events if e.action == "user_message") == TURNS


async def test_pop_clear_limit_and_settings(tmp_path: Path, fake_model: FakeOpenAIServer) -> None:
    agent = make_agent(fake_model)
    reference = SQLiteSession("pop")
    async with RestartableServer(tmp_path / "memory") as server:
        async with SessionServerSession("user-2", url=server.url, agent_id=AGENT) as session:
            assert isinstance(session, Session)
            assert await session.get_items() == [] and await session.pop_item() is None
            for target in (session, reference):
                await drive(agent, target, range(1, 4))
            ours, theirs = await session.get_items(), await reference.get_items()
            assert ours == theirs
            assert await session.get_items(limit=3) == theirs[-3:]
            assert await session.get_items(limit=-1) == theirs
            assert await session.get_items(limit=0) == []
            # Compaction records are never popped: compact, then pop every item.
            async with SessionClient(server.url, AGENT) as client:
                summary = {"mode": "summarize", "raw_tail_turns": 1}
                done = await client.compact("user-2", strategy=summary)
                assert done["compacted"]
            for _ in range(len(theirs)):
                mine, expected = await session.pop_item(), await reference.pop_item()
                assert mine == expected
                assert await session.get_items() == await reference.get_items()
            assert await session.pop_item() is None
            await drive(agent, session, range(4, 5))
            await session.clear_session()
            assert await session.get_items() == []
            await drive(agent, session, range(5, 6))
            assert len(await session.get_items()) > 0
        limited = SessionServerSession(
            "user-2", url=server.url, agent_id=AGENT, session_settings=SessionSettings(limit=2)
        )
        try:
            assert len(await limited.get_items()) == 2
        finally:
            await limited.aclose()
    reference.close()
    with pytest.raises(InvalidParamsError, match="url/registry"):
        SessionServerSession("x", agent_id=AGENT)


def test_run_sync_against_a_server_process(tmp_path: Path, fake_model: FakeOpenAIServer) -> None:
    agent = make_agent(fake_model)
    with ServerProcess(tmp_path / "memory") as proc:
        session = SessionServerSession("sync-user", url=proc.url, agent_id=AGENT)
        try:
            for k in range(1, 4):  # Runner.run_sync makes a new event loop every call
                result = Runner.run_sync(agent, f"turn {k}", session=session)
                assert str(result.final_output).startswith(("answer", "plain"))
            items = asyncio.run(session.get_items())
        finally:
            session.close()
    assert [i["content"] for i in items if i.get("role") == "user"] == [
        "turn 1",
        "turn 2",
        "turn 3",
    ]


async def test_many_items_are_converted_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A local session shares the server's event loop: adding more than
    ``ON_LOOP_ITEMS`` items converts them on a worker thread, reading converts them
    ``ON_LOOP_ITEMS`` at a time (yielding to the loop between), with and without a
    strategy; before, 200k items read held the loop 390 ms in one conversion, 50k added
    200 ms. A few items are converted in place, at once. The items read back are those
    added."""
    seen: dict[str, list[tuple[str, int]]] = {}
    for name in ("from_items", "to_input_items"):
        original = getattr(openai_agents, name)

        def wrapped(items: Any, _name: str = name, _original: Any = original) -> Any:
            seen.setdefault(_name, []).append((threading.current_thread().name, len(items)))
            return _original(items)

        monkeypatch.setattr(openai_agents, name, wrapped)
    piece = openai_agents.ON_LOOP_ITEMS
    many = [{"role": "user", "content": f"q{i}"} for i in range(2 * piece + 1)]
    main = threading.main_thread().name
    async with ActorRegistry(tmp_path, idle_timeout=None, context_limit=1000) as registry:
        plain = SessionServerSession("plain", registry=registry, agent_id="a")
        await plain.add_items(many)  # type: ignore[arg-type]
        assert [t for t, _ in seen["from_items"]] != [main], seen
        read = await plain.get_items()
        assert [i["content"] for i in read] == [i["content"] for i in many]
        assert seen["to_input_items"] == [(main, piece), (main, piece), (main, 1)], seen
        seen.clear()
        built = SessionServerSession(
            "built", registry=registry, agent_id="a", strategy={"mode": "none"}
        )
        await built.add_items(many[: piece + 1])  # type: ignore[arg-type]
        assert len(await built.get_items()) == piece + 1
        assert seen["to_input_items"] == [(main, piece), (main, 1)], seen
        seen.clear()
        await plain.add_items(many[:2])  # type: ignore[arg-type]
        assert len(await plain.get_items(limit=2)) == 2
    assert seen["from_items"] == [(main, 2)], seen


def _client_sockets(port: int) -> int:
    """Open TCP connections (ESTABLISHED) whose far end is 127.0.0.1:``port``: the
    connections clients hold to a server on that port (its own sockets have it as their
    near end)."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        remote, state = fields[2], fields[3]
        if state == "01" and int(remote.split(":")[1], 16) == port:
            count += 1
    return count


async def test_concurrent_first_calls_share_one_connection(tmp_path: Path) -> None:
    """Five concurrent ``add_items`` on a fresh remote session open one connection, and
    ``aclose()`` closes it; before, each opened its own and four stayed open."""
    with ServerProcess(tmp_path / "memory") as proc:
        port = int(proc.url.rsplit(":", 1)[1])
        session = SessionServerSession("user-c", url=proc.url, agent_id=AGENT)
        try:
            await asyncio.gather(
                *(session.add_items([{"role": "user", "content": f"m{i}"}]) for i in range(5))
            )
            assert _client_sockets(port) == 1
            items = await session.get_items()
            assert sorted(i["content"] for i in items) == [f"m{i}" for i in range(5)]
        finally:
            await session.aclose()
        assert _client_sockets(port) == 0


@pytest.mark.parametrize("where", ["remote", "local"])
async def test_a_limited_read_reads_only_the_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """``get_items(limit=n)`` asks for the newest events only (converting about ``n``
    items), and gives the items ``SQLiteSession`` gives, a model turn's several items
    included; before, it read and converted the whole history."""
    converted: list[int] = []
    original = openai_agents._items_of

    def counting(events: Any) -> Any:
        converted.append(len(events))
        return original(events)

    reference = SQLiteSession("limit")
    turn = [
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e"},
        {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{}"},
    ]
    history: list[Any] = [{"role": "user", "content": f"m{i}"} for i in range(200)]
    async with RestartableServer(tmp_path / "memory") as server:
        assert server.registry is not None
        session = (
            SessionServerSession("s", url=server.url, agent_id=AGENT)
            if where == "remote"
            else SessionServerSession("s", registry=server.registry, agent_id=AGENT)
        )
        try:
            for target in (session, reference):
                await target.add_items(history)
                await target.add_items(turn)  # one model turn: one event, two items
            monkeypatch.setattr(openai_agents, "_items_of", counting)
            for limit in (1, 2, 3, 20):
                converted.clear()
                assert await session.get_items(limit=limit) == await reference.get_items(limit)
                assert sum(converted) <= limit, (limit, converted)
            limited = SessionServerSession(
                "s",
                url=server.url,
                agent_id=AGENT,
                session_settings=SessionSettings(limit=5),
            )
            converted.clear()
            assert await limited.get_items() == await reference.get_items(5)
            assert sum(converted) <= 5
            await limited.aclose()
        finally:
            await session.aclose()
            reference.close()


async def test_pop_and_clear_log_nothing_at_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``pop_item`` and ``clear_session`` are normal operations: the mirror's rewrite
    after them logs below WARNING (before, each logged that the mirror was "repaired").
    The registry is closed before looking, so the mirror's work has all run."""
    caplog.set_level(logging.DEBUG)
    async with ActorRegistry(tmp_path / "memory") as registry:
        session = SessionServerSession("s", registry=registry, agent_id=AGENT)
        await session.add_items([{"role": "user", "content": f"m{i}"} for i in range(4)])
        await session.add_items(
            [
                {"type": "reasoning", "id": "rs", "summary": []},
                {"role": "assistant", "content": "a"},
            ]
        )
        assert await session.pop_item() == {"role": "assistant", "content": "a"}  # rewritten
        assert await session.pop_item() == {"type": "reasoning", "id": "rs", "summary": []}
        assert await session.pop_item() == {"role": "user", "content": "m3"}
        await session.clear_session()
        assert await session.get_items() == []
        await session.add_items([{"role": "user", "content": "again"}])
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert loud == [], [r.getMessage() for r in loud]
    assert any("mirror of session" in r.getMessage() for r in caplog.records)


def test_session_settings_are_normalised_as_the_sdk_does(tmp_path: Path) -> None:
    """A dict is accepted and becomes ``SessionSettings``; unknown keys and other types
    are refused with the SDK's ``TypeError``, before anything is opened."""
    registry = ActorRegistry(tmp_path / "memory")
    session = SessionServerSession(
        "s", registry=registry, agent_id=AGENT, session_settings={"limit": 3}
    )
    assert session.session_settings == SessionSettings(limit=3)
    given = SessionSettings(limit=1)
    same = SessionServerSession("s", registry=registry, agent_id=AGENT, session_settings=given)
    assert same.session_settings is given
    assert SessionServerSession("s", registry=registry, agent_id=AGENT).session_settings == (
        SessionSettings()
    )
    with pytest.raises(TypeError, match="Unknown session settings: limitt, other"):
        SessionServerSession(
            "s", registry=registry, agent_id=AGENT, session_settings={"other": 1, "limitt": 1}
        )
    with pytest.raises(TypeError, match="session must be a SessionSettings instance or a dict"):
        SessionServerSession("s", registry=registry, agent_id=AGENT, session_settings=5)  # type: ignore[arg-type]


async def test_a_remote_session_waits_for_a_server_within_its_reconnect_budget(
    tmp_path: Path,
) -> None:
    """The first call of a session whose server is not up yet waits for it (the server
    starts once the call is under way) within ``reconnect_budget``; a session with a
    small budget gives up."""
    port = free_port()
    url = f"ws://127.0.0.1:{port}"
    patient = SessionServerSession("s", url=url, agent_id=AGENT, reconnect_budget=60.0)
    impatient = SessionServerSession("s", url=url, agent_id=AGENT, reconnect_budget=0.2)
    try:
        with pytest.raises((OSError, SessionServerError)):
            await impatient.get_items(limit=1)
        call = asyncio.ensure_future(patient.add_items([{"role": "user", "content": "hi"}]))
        with ServerProcess(tmp_path / "memory", "--port", str(port)):
            await asyncio.wait_for(call, 60)
            assert await patient.get_items() == [{"role": "user", "content": "hi"}]
    finally:
        await patient.aclose()
        await impatient.aclose()


def test_the_reconnect_budget_reaches_the_client() -> None:
    """The client gets the session's budget as its own reconnect budget."""
    session = SessionServerSession(
        "s", url="ws://127.0.0.1:9", agent_id=AGENT, reconnect_budget=12.5
    )
    try:
        client = session._backend.client  # type: ignore[attr-defined]
        assert client.reconnect_budget == 12.5
    finally:
        session.close()
    for bad in (-1, float("inf"), float("nan"), True, "30"):
        with pytest.raises(InvalidParamsError, match="reconnect_budget"):
            SessionServerSession("s", url="ws://127.0.0.1:9", agent_id=AGENT, reconnect_budget=bad)  # type: ignore[arg-type]


async def test_fork_returns_a_session_on_a_fork(
    tmp_path: Path, fake_model: FakeOpenAIServer
) -> None:
    """``fork()`` gives a new session object whose items are this one's; the two diverge."""
    agent = make_agent(fake_model)
    server = RestartableServer(tmp_path / "memory")
    async with server, SessionServerSession("user-f", url=server.url, agent_id=AGENT) as session:
        await drive(agent, session, range(1, 3))
        items = await session.get_items()
        async with await session.fork(new_session_id="user-f-2") as forked:
            assert forked.session_id == "user-f-2"
            assert await forked.get_items() == items
            await drive(agent, forked, range(3, 4))
            assert len(await forked.get_items()) > len(items)
        assert await session.get_items() == items
    async with ActorRegistry(tmp_path / "local", idle_timeout=None) as registry:
        local = SessionServerSession("user-l", registry=registry, agent_id=AGENT)
        await drive(agent, local, range(1, 2))
        forked_local = await local.fork()
        assert forked_local.session_id != "user-l"
        assert await forked_local.get_items() == await local.get_items()
        actor = await registry.get(AGENT)
        row = await actor.get_session(forked_local.session_id)
        assert row is not None and row["parent_session_id"] == "user-l"


@pytest.mark.parametrize("where", ["remote", "local"])
async def test_the_session_exposes_the_recall_tools(tmp_path: Path, where: str) -> None:
    async with RestartableServer(tmp_path / "memory") as server:
        assert server.registry is not None
        session = (
            SessionServerSession("s", url=server.url, agent_id=AGENT)
            if where == "remote"
            else SessionServerSession("s", registry=server.registry, agent_id=AGENT)
        )
        try:
            await session.add_items([{"role": "user", "content": "the ferry leaves at nine"}])
            tools = await session.memory_tools()
            assert [t["name"] for t in tools][:2] == ["recall_search", "recall_expand"]
            assert tools[0]["type"] == "function"  # the Responses format by default
            out = await session.tool_call("recall_search", '{"query": "ferry"}')
            assert out["is_error"] is False and "ferry leaves at nine" in out["content"]
            out = await session.tool_call("recall_expand", {"from_seq": 1, "to_seq": 1})
            assert "#1 user_message: the ferry leaves at nine" in out["content"]
        finally:
            await session.aclose()
