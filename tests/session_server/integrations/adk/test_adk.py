"""``SessionServerSessionService`` beyond ADK's own cases: what session-server sees of an
ADK conversation, stale sessions, state after a lost update, compaction, restarts, the
``agent_id`` mapping, and ``SessionServerMemoryService.add_session_to_memory``."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.errors import StaleSessionError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.models.google_llm import Gemini
from google.adk.runners import Runner
from google.adk.sessions.base_session_service import GetSessionConfig
from google.adk.sessions.in_memory_session_service import InMemorySessionService
from google.genai import types
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from session_server.integrations.adk import (
    SessionServerMemoryService,
    SessionServerSessionService,
    _app_holder,
    server_session_id,
)
from session_server.integrations.adk_events import (
    COMPACTION_INVOCATION,
    adk_events_of,
    adk_usage,
    event_to_records,
    split_state,
)
from session_server.values.errors import InvalidParamsError
from tests.session_server.integrations.adk.conftest import AGENT
from tests.support.gemini_server import gemini_base_url, weather_gemini
from tests.support.openai_server import FakeOpenAIServer
from tests.support.server import RestartableServer, running_server

APP = "app"
USER = "u"


def get_weather(city: str) -> dict[str, str]:
    """The weather in a city."""
    return {"city": city, "forecast": f"{city}: 18°C and sunny"}


def call_event(call_id: str, city: str, invocation: str = "inv") -> Event:
    return Event(
        invocation_id=invocation,
        author="weather_agent",
        content=types.Content(
            role="model",
            parts=[
                types.Part(
                    function_call=types.FunctionCall(
                        id=call_id, name="get_weather", args={"city": city}
                    )
                )
            ],
        ),
    )


def result_event(call_id: str, city: str, invocation: str = "inv") -> Event:
    return Event(
        invocation_id=invocation,
        author="weather_agent",
        content=types.Content(
            role="user",
            parts=[
                types.Part(
                    function_response=types.FunctionResponse(
                        id=call_id,
                        name="get_weather",
                        response={"result": f"{city}: sunny " + "x" * 200},
                    )
                )
            ],
        ),
    )


def text_event(author: str, text: str, invocation: str = "inv") -> Event:
    role = "user" if author == "user" else "model"
    return Event(
        invocation_id=invocation,
        author=author,
        content=types.Content(role=role, parts=[types.Part(text=text)]),
    )


def turn(i: int) -> list[Event]:
    inv = f"inv-{i}"
    return [
        text_event("user", f"weather in city{i}?", inv),
        call_event(f"call-{i}", f"city{i}", inv),
        result_event(f"call-{i}", f"city{i}", inv),
        text_event("weather_agent", f"city{i} is sunny", inv),
    ]


async def test_events_are_ordinary_session_server_events(
    served: SessionServerSessionService,
) -> None:
    """The inspector, search, compaction and adapters see messages, calls and results."""
    session = await served.create_session(app_name=APP, user_id=USER)
    for event in turn(1):
        await served.append_event(session, event)
    backend = served.agents.of(APP)
    sid = server_session_id(APP, USER, session.id)
    assert sid == f"{APP}~{USER}~{session.id}"
    records = await backend.load(sid, limit=None, tail=False)
    assert [r.action for r in records] == [
        "user_message", "tool_call_request", "tool_result", "agent_message"
    ]  # fmt: skip
    assert records[0].content == "weather in city1?"
    assert records[1].tool_calls is not None and records[1].tool_calls[0].id == "call-1"
    assert records[1].tool_calls[0].arguments == {"city": "city1"}
    assert records[2].tool_call_id == "call-1" and records[2].tool_name == "get_weather"
    assert json.loads(records[2].content)["result"].startswith("city1: sunny")
    ctx = await backend.build(sid, {})
    assert [m.role for m in ctx.messages] == ["user", "assistant", "tool", "assistant"]


async def test_stale_session_refuses_to_append(served: SessionServerSessionService) -> None:
    session = await served.create_session(app_name=APP, user_id=USER)
    first = await served.get_session(app_name=APP, user_id=USER, session_id=session.id)
    second = await served.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert first is not None and second is not None
    await served.append_event(first, text_event("user", "one"))
    with pytest.raises(StaleSessionError):
        await served.append_event(second, text_event("user", "two"))
    await served.append_event(first, text_event("user", "three"))  # the fresh one goes on
    got = await served.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert got is not None
    assert [e.content.parts[0].text for e in got.events] == ["one", "three"]  # type: ignore[index,union-attr]


async def test_append_to_deleted_session(served: SessionServerSessionService) -> None:
    session = await served.create_session(app_name=APP, user_id=USER)
    await served.delete_session(app_name=APP, user_id=USER, session_id=session.id)
    with pytest.raises(SessionNotFoundError):
        await served.append_event(session, text_event("user", "hello"))


async def test_state_update_lost_after_its_event_is_replayed(
    served: SessionServerSessionService,
) -> None:
    """An event whose state update never reached the session's metadata (the process died
    between the two) still counts: its ``state_delta`` is replayed on read."""
    session = await served.create_session(app_name=APP, user_id=USER, state={"a": 1})
    await served.append_event(
        session, Event(invocation_id="i", author="user", actions=EventActions(state_delta={"b": 2}))
    )
    lost = Event(
        invocation_id="i", author="user", actions=EventActions(state_delta={"a": 3, "c": 4})
    )
    sid = server_session_id(APP, USER, session.id)
    await served.agents.of(APP).append(sid, event_to_records(lost), None)
    got = await served.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert got is not None and got.state == {"a": 3, "b": 2, "c": 4}
    await served.append_event(
        got, Event(invocation_id="i", author="user", actions=EventActions(state_delta={"d": 5}))
    )
    again = await served.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert again is not None and again.state == {"a": 3, "b": 2, "c": 4, "d": 5}


async def test_state_tail_is_written_back(served: SessionServerSessionService) -> None:
    """Events without a session delta leave ``adk_state_seq`` behind; a read that replays
    64 records or more writes the state back, so later reads start from there."""
    session = await served.create_session(app_name=APP, user_id=USER, state={"k": 0})
    await served.append_event(
        session, Event(invocation_id="i", author="user", actions=EventActions(state_delta={"k": 1}))
    )
    for i in range(70):
        await served.append_event(session, text_event("user", f"message {i}"))
    backend = served.agents.of(APP)
    sid = server_session_id(APP, USER, session.id)
    before = await backend.get(sid)
    assert before is not None and before["metadata"]["adk_state_seq"] == 1
    got = await served.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert got is not None and got.state == {"k": 1}
    after = await backend.get(sid)
    assert after is not None and after["metadata"]["adk_state_seq"] == 71
    assert after["metadata"]["adk_state"] == {"k": 1}
    again = await served.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert again is not None and again.state == {"k": 1} and len(again.events) == 71


@pytest.mark.parametrize("mode", ["compact", "summarize"])
async def test_compacted_history_is_valid_adk_events(tmp_path: Path, mode: str) -> None:
    strategy: dict[str, Any] = (
        {"mode": "compact", "compact_keep": 2, "compact_trigger_turns": 3}
        if mode == "compact"
        else {"mode": "summarize", "raw_tail_turns": 2}
    )
    async with running_server(tmp_path / "memory") as server:
        service = SessionServerSessionService(url=server.url, agent_id=AGENT, strategy=strategy)
        plain = SessionServerSessionService(url=server.url, agent_id=AGENT)
        session = await service.create_session(app_name=APP, user_id=USER)
        appended: list[Event] = []
        for i in range(12):
            for event in turn(i):
                await service.append_event(session, event)
                appended.append(event)
        if mode == "summarize":
            actor = await server.registry.get(AGENT)
            await actor.compact(server_session_id(APP, USER, session.id), strategy=strategy)
        got = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert got is not None
        events = got.events
        calls = [
            p.function_call.id
            for e in events
            for p in (e.content.parts if e.content else []) or []
            if p.function_call
        ]
        responses = [
            p.function_response
            for e in events
            for p in (e.content.parts if e.content else []) or []
            if p.function_response
        ]
        assert sorted(calls) == sorted(r.id for r in responses)  # every call has its response
        assert events[-4:] == appended[-4:]  # the raw tail, verbatim
        if mode == "compact":
            placeholders = [r for r in responses if "⟦removed" in str(r.response)]
            assert placeholders and len(events) == len(appended)
        else:
            assert events[0].invocation_id == COMPACTION_INVOCATION
            assert "[MEMORY" in events[0].content.parts[0].text  # type: ignore[index,union-attr,operator]
            assert len(events) < len(appended)
        raw = await plain.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert raw is not None and raw.events == appended  # raw history stays whole
        await service.append_event(got, text_event("user", "after compaction"))
        await service.close()
        await plain.close()


async def test_restart_keeps_everything(tmp_path: Path) -> None:
    server = RestartableServer(tmp_path / "memory")
    await server.start()
    service = SessionServerSessionService(url=server.url, agent_id=AGENT)
    try:
        session = await service.create_session(
            app_name=APP, user_id=USER, state={"app:x": 1, "user:y": 2, "z": 3}
        )
        events = turn(1)
        for event in events:
            await service.append_event(session, event)
        await server.stop()
        await server.start()
        got = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert got is not None and got.events == events
        assert got.state == {"app:x": 1, "user:y": 2, "z": 3}
        await service.append_event(got, text_event("user", "resumed"))
    finally:
        await service.close()
        await server.stop()


async def test_agent_id_mapping_from_app_name(tmp_path: Path) -> None:
    async with running_server(tmp_path / "memory") as server:
        service = SessionServerSessionService(
            registry=server.registry, agent_id={"support": "support-agent", "sales": "sales-agent"}
        )
        a = await service.create_session(app_name="support", user_id=USER, session_id="same")
        b = await service.create_session(app_name="sales", user_id=USER, session_id="same")
        await service.append_event(a, text_event("user", "support question"))
        await service.append_event(b, text_event("user", "sales question"))
        support = await server.registry.get("support-agent")
        sales = await server.registry.get("sales-agent")
        got = await support.load_events(server_session_id("support", USER, "same"))
        assert [e.content for e in got] == ["support question"]
        got = await sales.load_events(server_session_id("sales", USER, "same"))
        assert [e.content for e in got] == ["sales question"]
        with pytest.raises(InvalidParamsError, match="app_name"):
            await service.create_session(app_name="unknown", user_id=USER)


def test_server_session_ids() -> None:
    assert server_session_id("app", "ada", "s1") == "app~ada~s1"
    assert server_session_id("a/b", "x~y", "100%") == "a%2Fb~x%7Ey~100%25"
    assert server_session_id("app", "ada", "s1") != server_session_id("app", "bob", "s1")
    long = server_session_id("app", "ada", "s" * 200)
    assert long.startswith("adk-") and len(long) == 36
    assert server_session_id("app", "ada", "bad\x00id").startswith("adk-")


def test_constructor_refusals() -> None:
    with pytest.raises(InvalidParamsError, match="url/registry"):
        SessionServerSessionService(agent_id="a")
    with pytest.raises(InvalidParamsError, match="strategy"):
        SessionServerSessionService(url="ws://127.0.0.1:1", agent_id="a", strategy="compact")  # type: ignore[arg-type]
    with pytest.raises(InvalidParamsError, match="reconnect_budget"):
        SessionServerSessionService(url="ws://127.0.0.1:1", agent_id="a", reconnect_budget=-1)
    with pytest.raises(InvalidParamsError, match="limit"):
        SessionServerMemoryService(url="ws://127.0.0.1:1", agent_id="a", limit=0)


async def test_add_session_from_another_service_to_memory(tmp_path: Path) -> None:
    """A session kept by ADK's in-memory service is copied in once (events not yet there
    only), and then reads back through ``SessionServerSessionService``."""
    elsewhere = InMemorySessionService()
    session = await elsewhere.create_session(app_name=APP, user_id=USER, session_id="s")
    for event in turn(1):
        await elsewhere.append_event(session, event)
    async with running_server(tmp_path / "memory") as server:
        memory = SessionServerMemoryService(url=server.url, agent_id=AGENT)
        service = SessionServerSessionService(url=server.url, agent_id=AGENT)
        await memory.add_session_to_memory(session)
        for event in turn(2):
            await elsewhere.append_event(session, event)
        await memory.add_session_to_memory(session)
        await memory.add_session_to_memory(session)
        got = await service.get_session(app_name=APP, user_id=USER, session_id="s")
        assert got is not None and got.events == session.events
        await memory.close()
        await service.close()


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
_part = st.one_of(
    st.builds(lambda t: types.Part(text=t), st.text(max_size=20)),
    st.builds(lambda t: types.Part(text=t, thought=True), st.text(max_size=20)),
    st.builds(
        lambda i, n, a: types.Part(function_call=types.FunctionCall(id=i, name=n, args=a)),
        st.none() | st.text(min_size=1, max_size=6),
        st.text(min_size=1, max_size=6),
        st.dictionaries(st.text(max_size=5), _json, max_size=3),
    ),
    st.builds(
        lambda i, n, r: types.Part(
            function_response=types.FunctionResponse(id=i, name=n, response=r)
        ),
        st.none() | st.text(min_size=1, max_size=6),
        st.text(min_size=1, max_size=6),
        st.dictionaries(st.text(max_size=5), _json, max_size=3),
    ),
    st.builds(
        lambda b: types.Part(inline_data=types.Blob(mime_type="image/png", data=b)),
        st.binary(max_size=16),
    ),
)
_event = st.builds(
    lambda author, parts, delta, meta, ts: Event(
        invocation_id="inv",
        author=author,
        timestamp=ts,
        content=types.Content(role="user" if author == "user" else "model", parts=parts)
        if parts is not None
        else None,
        actions=EventActions(state_delta=delta),
        custom_metadata=meta,
    ),
    st.sampled_from(["user", "agent", "tool_agent"]),
    st.none() | st.lists(_part, max_size=4),
    st.dictionaries(st.sampled_from(["a", "app:b", "user:c", "d"]), _json, max_size=3),
    st.none() | st.dictionaries(st.text(max_size=5), _json, max_size=2),
    st.floats(0, 4e9, allow_nan=False),
)


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(_event)
def test_records_round_trip_any_event(event: Event) -> None:
    records = event_to_records(event)
    assert adk_events_of(records) == [event]
    assert sum(1 for r in records if r.metadata and "adk_event" in r.metadata) == 1
    responses = (
        [p for p in (event.content.parts or []) if p.function_response] if event.content else []
    )
    assert len(records) == max(1, len(responses))


@given(st.dictionaries(st.text(max_size=8), _json, max_size=6))
def test_split_state_scopes(state: dict[str, Any]) -> None:
    app, user, own = split_state(state)
    assert not any(k.startswith(("app:", "user:", "temp:")) for k in own)
    kept = {
        **own,
        **{"app:" + k: v for k, v in app.items()},
        **{"user:" + k: v for k, v in user.items()},
    }
    assert kept == {k: v for k, v in state.items() if not k.startswith("temp:")}


def memory_event(tag: str, text: str | None, author: str = "user") -> Event:
    content = types.Content(parts=[types.Part(text=text)]) if text is not None else None
    return Event(
        id=f"event-{tag}",
        invocation_id=f"inv-{tag}",
        author=author,
        timestamp=12345.0,
        content=content,
    )


async def test_add_events_to_memory(tmp_path: Path) -> None:
    """ADK's memory cases that do not search: explicit events are a delta, appended
    without replacing, deduplicated by id; no ``session_id`` means the user's
    ``adk-memory`` session; a session with no events is fine."""
    async with running_server(tmp_path / "memory") as server:
        memory = SessionServerMemoryService(registry=server.registry, agent_id=AGENT)
        sessions = SessionServerSessionService(registry=server.registry, agent_id=AGENT)

        async def ids(session_id: str) -> list[str]:
            got = await sessions.get_session(app_name=APP, user_id=USER, session_id=session_id)
            assert got is not None
            return [e.id for e in got.events]

        first = [memory_event("1a", "The ADK is a great toolkit."), memory_event("1b", None)]
        await memory.add_events_to_memory(app_name=APP, user_id=USER, session_id="s1", events=first)
        assert await ids("s1") == ["event-1a", "event-1b"]
        later = [memory_event("1a", "Updated duplicate text."), memory_event("1d", "A new fact.")]
        await memory.add_events_to_memory(app_name=APP, user_id=USER, session_id="s1", events=later)
        assert await ids("s1") == ["event-1a", "event-1b", "event-1d"]
        await memory.add_events_to_memory(app_name=APP, user_id=USER, events=[later[1]])
        assert await ids("adk-memory") == ["event-1d"]
        empty = await InMemorySessionService().create_session(
            app_name=APP, user_id=USER, session_id="s4"
        )
        await memory.add_session_to_memory(empty)
        assert await ids("s4") == []


def test_one_service_from_several_loops(tmp_path: Path) -> None:
    """``Runner.run`` (sync) runs each call on a loop of its own: one remote service
    serves calls from several loops, state writes included."""
    server = RestartableServer(tmp_path / "memory")

    async def start() -> None:
        await server.start()

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(60)
    service = SessionServerSessionService(url=server.url, agent_id=AGENT)
    try:
        session = asyncio.run(
            service.create_session(app_name=APP, user_id=USER, state={"app:n": 0})
        )
        for i in (1, 2):
            delta = EventActions(state_delta={"app:n": i, "user:m": i})
            asyncio.run(
                service.append_event(
                    session, Event(invocation_id=f"i{i}", author="user", actions=delta)
                )
            )
        got = asyncio.run(service.get_session(app_name=APP, user_id=USER, session_id=session.id))
        assert got is not None and got.state == {"app:n": 2, "user:m": 2}
        asyncio.run(service.close())
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


async def test_large_events_page_under_the_answer_bound(tmp_path: Path) -> None:
    """Events with inline data bigger than a page the server may answer: reads ask again
    with smaller pages, and every event comes back whole."""
    async with running_server(tmp_path / "memory", max_answer_bytes=256 * 1024) as server:
        service = SessionServerSessionService(url=server.url, agent_id=AGENT)
        session = await service.create_session(app_name=APP, user_id=USER)
        appended = []
        for i in range(12):
            data = bytes([i]) * 60_000
            part = types.Part.from_bytes(data=data, mime_type="application/octet-stream")
            event = Event(
                invocation_id=f"i{i}",
                author="user",
                content=types.Content(role="user", parts=[part]),
            )
            await service.append_event(session, event)
            appended.append(event)
        got = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert got is not None and got.events == appended
        recent = await service.get_session(
            app_name=APP, user_id=USER, session_id=session.id,
            config=GetSessionConfig(num_recent_events=5),
        )  # fmt: skip
        assert recent is not None and recent.events == appended[-5:]
        await service.close()


def thinking_gemini(path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """``weather_gemini`` reporting cached content and thoughts in its usage."""
    status, payload = weather_gemini(path, body)
    if status == 200:
        payload["usageMetadata"] = {
            "promptTokenCount": 50,
            "candidatesTokenCount": 5,
            "cachedContentTokenCount": 20,
            "thoughtsTokenCount": 3,
            "totalTokenCount": 58,
        }
    return status, payload


@pytest.mark.parametrize("where", ["remote", "local"])
async def test_runner_usage_reaches_memory_usage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    """A ``Runner`` on a fake Gemini: each model event's ``usage_metadata`` is stored
    with it (``events.append``'s ``usage``), so ``memory.usage`` shows the run's tokens
    with the model's version; the events themselves come back unchanged."""
    monkeypatch.setenv("GOOGLE_API_KEY", "test")
    async with running_server(tmp_path / "memory") as server:
        if where == "remote":
            service = SessionServerSessionService(url=server.url, agent_id=AGENT)
        else:
            service = SessionServerSessionService(registry=server.registry, agent_id=AGENT)
        with FakeOpenAIServer(thinking_gemini) as model:
            runner = Runner(
                app_name=APP,
                agent=LlmAgent(
                    name="weather_agent",
                    model=Gemini(
                        model="gemini-2.5-flash", base_url=gemini_base_url(model.base_url)
                    ),
                    tools=[get_weather],
                ),
                session_service=service,
            )
            session = await service.create_session(app_name=APP, user_id=USER)
            for turn in (1, 2):
                message = types.Content(role="user", parts=[types.Part(text=f"Weather in {turn}?")])
                async for _ in runner.run_async(
                    user_id=USER, session_id=session.id, new_message=message
                ):
                    pass
        actor = await server.registry.get(AGENT)
        sid = server_session_id(APP, USER, session.id)
        usage = await actor.memory_usage(session_id=sid, group_by="model")
        calls = 4  # two turns of a call and an answer
        assert usage["totals"]["input_tokens"] == 50 * calls
        assert usage["totals"]["output_tokens"] == (5 + 3) * calls
        assert usage["totals"]["cached_input_tokens"] == 20 * calls
        assert usage["totals"]["reasoning_tokens"] == 3 * calls
        assert usage["totals"]["turns"] == calls
        assert [g["key"] for g in usage["groups"]] == ["gemini-2.5-flash"]
        got = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert got is not None
        used = [e.usage_metadata for e in got.events if e.usage_metadata is not None]
        assert len(used) == calls and used[0].thoughts_token_count == 3
        await service.close()


def test_usage_of_an_event() -> None:
    """``adk_usage``: the event's usage in Gemini's shape and its model; none for an event
    without usage, or with counts that are no valid usage (the event is still stored)."""
    event = Event(
        author="agent",
        model_version="gemini-2.5-pro",
        usage_metadata=types.GenerateContentResponseUsageMetadata(
            prompt_token_count=10, candidates_token_count=2, total_token_count=12
        ),
    )
    usage, model = adk_usage(event)
    assert usage == {"prompt_token_count": 10, "candidates_token_count": 2, "total_token_count": 12}
    assert model == "gemini-2.5-pro"
    assert adk_usage(Event(author="user")) == (None, None)
    odd = types.GenerateContentResponseUsageMetadata(
        prompt_token_count=1, cached_content_token_count=5
    )
    assert adk_usage(Event(author="agent", usage_metadata=odd)) == (None, None)
    nameless = Event(author="agent", model_version="", usage_metadata=event.usage_metadata)
    assert adk_usage(nameless) == (usage, None)


def scoped_event(name: str, i: int) -> Event:
    delta = {f"app:{name}{i}": i, f"user:{name}{i}": [i], "app:last": name}
    return Event(invocation_id=f"{name}{i}", author="user", actions=EventActions(state_delta=delta))


@pytest.mark.parametrize("where", ["remote", "local"])
async def test_app_and_user_state_merge_per_key_across_services(tmp_path: Path, where: str) -> None:
    """Two service objects (two connections, or two in-process services: no lock they
    share) update ``app:`` and ``user:`` keys of one app and user at once: every key of
    both stays, as with ADK's ``DatabaseSessionService`` (a read-modify-write of the
    holder would lose one writer's keys)."""
    async with running_server(tmp_path / "memory") as server:

        def make() -> SessionServerSessionService:
            if where == "remote":
                return SessionServerSessionService(url=server.url, agent_id=AGENT)
            return SessionServerSessionService(registry=server.registry, agent_id=AGENT)

        one, two = make(), make()
        first = await one.create_session(app_name=APP, user_id=USER, state={"app:seed": 0})
        second = await two.create_session(app_name=APP, user_id=USER)
        rounds = 12
        for i in range(rounds):
            await asyncio.gather(
                one.append_event(first, scoped_event("one", i)),
                two.append_event(second, scoped_event("two", i)),
            )
        expected_app = {f"app:{n}{i}": i for n in ("one", "two") for i in range(rounds)}
        expected_user = {f"user:{n}{i}": [i] for n in ("one", "two") for i in range(rounds)}
        for service, session in ((one, first), (two, second)):
            got = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
            assert got is not None
            app = {k: v for k, v in got.state.items() if k.startswith("app:")}
            assert app["app:last"] in ("one", "two")
            assert app == {**expected_app, "app:seed": 0, "app:last": app["app:last"]}
            assert {k: v for k, v in got.state.items() if k.startswith("user:")} == expected_user
        user_state = await two.get_user_state(app_name=APP, user_id=USER)
        assert user_state == {k.removeprefix("user:"): v for k, v in expected_user.items()}
        await one.close()
        await two.close()


async def test_holders_of_the_earlier_layout_are_read_and_merged(tmp_path: Path) -> None:
    """A holder session written before per-key holders (one ``adk_state`` object) is
    read as it was; new keys merge beside it and win over its keys."""
    async with running_server(tmp_path / "memory") as server:
        actor = await server.registry.get(AGENT)
        await actor.create_session(
            {"adk_kind": "app", "adk_app": APP, "adk_state": {"old": 1, "both": "old"}},
            session_id=_app_holder(APP),
        )
        service = SessionServerSessionService(registry=server.registry, agent_id=AGENT)
        session = await service.create_session(app_name=APP, user_id=USER)
        assert session.state == {"app:old": 1, "app:both": "old"}
        delta = EventActions(state_delta={"app:both": "new", "app:more": 2})
        await service.append_event(session, Event(author="user", actions=delta))
        got = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert got is not None
        assert got.state == {"app:old": 1, "app:both": "new", "app:more": 2}
        await service.close()


ROOT = str(Path(__file__).resolve().parents[4])
CHILD = """
import asyncio, sys
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from session_server.integrations.adk import SessionServerSessionService

async def main(url):
    service = SessionServerSessionService(url=url, agent_id=sys.argv[2])
    session = await service.create_session(app_name="app", user_id="u")
    print("ready", flush=True)
    sys.stdin.readline()
    for i in range(30):
        delta = {f"app:child{i}": i, f"user:child{i}": i}
        await service.append_event(session, Event(author="user", actions=EventActions(state_delta=delta)))
    await service.close()

asyncio.run(main(sys.argv[1]))
"""


async def test_app_and_user_state_merge_per_key_across_processes(tmp_path: Path) -> None:
    """A second process (its own service and connection) writes ``app:``/``user:`` keys
    while this one does: both processes' keys all stay."""
    async with running_server(tmp_path / "memory") as server:
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CHILD, server.url, AGENT,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONPATH": ROOT},
        )  # fmt: skip
        assert child.stdin is not None and child.stdout is not None
        assert (await child.stdout.readline()).strip() == b"ready"
        service = SessionServerSessionService(url=server.url, agent_id=AGENT)
        session = await service.create_session(app_name=APP, user_id=USER)
        child.stdin.write(b"go\n")
        await child.stdin.drain()
        for i in range(30):
            delta = {f"app:parent{i}": i, f"user:parent{i}": i}
            await service.append_event(session, Event(author="user", actions=EventActions(state_delta=delta)))  # fmt: skip
        assert await child.wait() == 0
        got = await service.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert got is not None
        expected = {
            f"{scope}:{who}{i}": i
            for scope in ("app", "user")
            for who in ("parent", "child")
            for i in range(30)
        }
        assert got.state == expected
        await service.close()
