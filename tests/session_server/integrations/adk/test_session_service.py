"""The behaviour of ADK's session services: the cases of google-adk's
``tests/unittests/sessions/test_session_service.py`` (2.13), run on ADK's own
``InMemorySessionService`` and on ``SessionServerSessionService`` remote and in-process
(the ``session_service`` fixture), so each states ADK's behaviour, not ours.

Written anew from google-adk's file (its sdist on PyPI ships no tests), adapted only in
how the service is made. Cases ADK runs on its database service only (stale sessions,
concurrent stale writers, marker-less sessions, timestamp drift) run here on ours only
(``served``). Every case of google-adk's file, and where it is covered here or why it
cannot apply: ``docs/adk-conformance.md``.

Cases of google-adk's file that cannot apply, as they test one backend's internals:
SQLAlchemy engine options (pool pre-ping and its override, read-only engines and
factories for Spanner and other dialects), timezone stripping per SQL dialect,
``SqliteSessionService`` URL parsing and read-only URIs, rollback on a failed commit
and recovery after several (SQLAlchemy session spies), ``prepare_tables`` races and
idempotence, ``_get_or_create_state``, row locks requested per state scope, revision
fields read before commit, missing app/user state rows (tables of
``DatabaseSessionService``), appending through the in-memory service's own storage
object, and Vertex AI.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import pytest
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.genai import types

APP = "my_app"
USER = "test_user"


def _text(author: str, text: str, **fields: object) -> Event:
    role = "user" if author == "user" else "model"
    return Event(
        invocation_id=str(fields.pop("invocation_id", "inv")),
        author=author,
        content=types.Content(role=role, parts=[types.Part(text=text)]),
        **fields,  # type: ignore[arg-type]
    )


async def test_get_empty_session(session_service: BaseSessionService) -> None:
    assert not await session_service.get_session(app_name=APP, user_id=USER, session_id="123")


async def test_create_get_session(session_service: BaseSessionService) -> None:
    state = {"key": "value"}
    session = await session_service.create_session(app_name=APP, user_id=USER, state=state)
    assert session.app_name == APP and session.user_id == USER and session.id
    assert session.state == state
    assert session.last_update_time <= datetime.now(UTC).timestamp()
    got = await session_service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert got is not None
    assert (got.id, got.app_name, got.user_id, got.state, got.events) == (
        session.id, APP, USER, state, []
    )  # fmt: skip
    await session_service.delete_session(app_name=APP, user_id=USER, session_id=session.id)
    assert (
        await session_service.get_session(app_name=APP, user_id=USER, session_id=session.id) is None
    )


async def test_create_and_list_sessions(session_service: BaseSessionService) -> None:
    ids = [f"session{i}" for i in range(5)]
    for sid in ids:
        await session_service.create_session(
            app_name=APP, user_id=USER, session_id=sid, state={"key": "value" + sid}
        )
    sessions = (await session_service.list_sessions(app_name=APP, user_id=USER)).sessions
    assert {s.id for s in sessions} == set(ids)
    for session in sessions:
        assert session.state == {"key": "value" + session.id}
        assert session.events == []


async def test_list_sessions_all_users(session_service: BaseSessionService) -> None:
    for user, sid in (("user1", "session1a"), ("user1", "session1b"), ("user2", "session2a")):
        await session_service.create_session(
            app_name=APP, user_id=user, session_id=sid, state={"key": "value" + sid[-2:]}
        )
    first = (await session_service.list_sessions(app_name=APP, user_id="user1")).sessions
    assert {s.id: s.state for s in first} == {
        "session1a": {"key": "value1a"}, "session1b": {"key": "value1b"}
    }  # fmt: skip
    second = (await session_service.list_sessions(app_name=APP, user_id="user2")).sessions
    assert [(s.id, s.user_id) for s in second] == [("session2a", "user2")]
    every = (await session_service.list_sessions(app_name=APP, user_id=None)).sessions
    assert {s.id for s in every} == {"session1a", "session1b", "session2a"}
    assert (
        await session_service.list_sessions(app_name="other_app", user_id="user1")
    ).sessions == []


async def test_list_sessions_oldest_update_first(session_service: BaseSessionService) -> None:
    a = await session_service.create_session(app_name=APP, user_id=USER, session_id="a")
    await session_service.create_session(app_name=APP, user_id=USER, session_id="b")
    await session_service.append_event(a, _text("user", "later", timestamp=time.time() + 1))
    sessions = (await session_service.list_sessions(app_name=APP, user_id=USER)).sessions
    assert [s.id for s in sessions] == ["b", "a"]


async def test_get_session_respects_user_id(session_service: BaseSessionService) -> None:
    s1 = await session_service.create_session(app_name=APP, user_id="u1", session_id="s1")
    await session_service.append_event(s1, Event(invocation_id="inv1", author="user"))
    await session_service.create_session(app_name=APP, user_id="u2", session_id="s1")
    got = await session_service.get_session(app_name=APP, user_id="u2", session_id="s1")
    assert got is not None and got.user_id == "u2" and got.events == []
    first = await session_service.get_session(app_name=APP, user_id="u1", session_id="s1")
    assert first is not None and len(first.events) == 1


async def test_session_last_update_time_updates_on_event(
    session_service: BaseSessionService,
) -> None:
    session = await session_service.create_session(app_name=APP, user_id=USER)
    original = session.last_update_time
    event = Event(invocation_id="invocation", author="user", timestamp=original + 10)
    await session_service.append_event(session=session, event=event)
    assert session.last_update_time == pytest.approx(original + 10, abs=1e-6)
    got = await session_service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert got is not None
    assert got.last_update_time == pytest.approx(original + 10, abs=1e-6)


async def test_append_event_bytes(session_service: BaseSessionService) -> None:
    session = await session_service.create_session(app_name=APP, user_id=USER)
    content = types.Content(
        role="user", parts=[types.Part.from_bytes(data=b"test_image_data", mime_type="image/png")]
    )
    grounding = types.GroundingMetadata(
        search_entry_point=types.SearchEntryPoint(sdk_blob=b"test_sdk_blob")
    )
    event = Event(invocation_id="inv", author="user", content=content, grounding_metadata=grounding)
    await session_service.append_event(session=session, event=event)
    assert session.events[0].content == content
    got = await session_service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert got is not None and len(got.events) == 1
    assert got.events[0].content == content
    assert got.events[0].grounding_metadata == grounding


async def test_append_event_to_stale_session(served: BaseSessionService) -> None:
    """ADK runs this case on its database service only (the in-memory one never goes
    stale); the session-server service is persistent, so it applies."""
    now = datetime.now(UTC).timestamp()
    original = await served.create_session(app_name=APP, user_id=USER)
    await served.append_event(
        original,
        Event(invocation_id="inv1", author="user", timestamp=now + 1,
              actions=EventActions(state_delta={"sk1": "v1"})),
    )  # fmt: skip
    updated = await served.get_session(app_name=APP, user_id=USER, session_id=original.id)
    assert updated is not None
    await served.append_event(
        updated,
        Event(invocation_id="inv2", author="user", timestamp=now + 2,
              actions=EventActions(state_delta={"sk2": "v2"})),
    )  # fmt: skip
    assert original.last_update_time < updated.last_update_time
    assert len(original.events) == 1 and "sk2" not in original.state
    with pytest.raises(ValueError, match="modified in storage"):
        await served.append_event(
            original,
            Event(invocation_id="inv3", author="user", timestamp=now + 3,
                  actions=EventActions(state_delta={"sk3": "v3"})),
        )  # fmt: skip
    final = await served.get_session(app_name=APP, user_id=USER, session_id=original.id)
    assert final is not None
    assert [e.invocation_id for e in final.events] == ["inv1", "inv2"]
    assert (final.state.get("sk1"), final.state.get("sk2"), final.state.get("sk3")) == (
        "v1", "v2", None
    )  # fmt: skip


async def test_append_event_concurrent_stale_sessions_reject_stale_writer(
    served: BaseSessionService,
) -> None:
    session = await served.create_session(app_name=APP, user_id=USER)
    iterations = 8
    for i in range(iterations):
        latest = await served.get_session(app_name=APP, user_id=USER, session_id=session.id)
        assert latest is not None
        stale_1, stale_2 = latest.model_copy(deep=True), latest.model_copy(deep=True)
        base = latest.last_update_time + 10.0
        results = await asyncio.gather(
            served.append_event(stale_1, Event(invocation_id=f"inv{i}-1", author="user",
                timestamp=base + 1, actions=EventActions(state_delta={f"sk{i}-1": f"v{i}-1"}))),
            served.append_event(stale_2, Event(invocation_id=f"inv{i}-2", author="user",
                timestamp=base + 2, actions=EventActions(state_delta={f"sk{i}-2": f"v{i}-2"}))),
            return_exceptions=True,
        )  # fmt: skip
        errors = [r for r in results if isinstance(r, BaseException)]
        assert len(errors) == 1 and isinstance(errors[0], ValueError)
        assert "modified in storage" in str(errors[0])
    final = await served.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert final is not None and len(final.events) == iterations
    for i in range(iterations):
        values = {final.state.get(f"sk{i}-1"), final.state.get(f"sk{i}-2")}
        assert values & {f"v{i}-1", f"v{i}-2"} and None in values


async def test_append_event_allows_markerless_current_session(served: BaseSessionService) -> None:
    session = await served.create_session(app_name=APP, user_id=USER, session_id="s1")
    first = Event(invocation_id="inv1", author="user", timestamp=session.last_update_time + 10)
    await served.append_event(session, first)
    session._storage_update_marker = None
    session.last_update_time -= 0.0001
    await served.append_event(
        session, Event(invocation_id="inv2", author="user", timestamp=first.timestamp + 10)
    )
    got = await served.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert got is not None and [e.invocation_id for e in got.events] == ["inv1", "inv2"]


async def test_append_event_allows_timestamp_drift_for_current_session(
    served: BaseSessionService,
) -> None:
    session = await served.create_session(app_name=APP, user_id=USER, session_id="s1")
    first = Event(invocation_id="inv1", author="user", timestamp=session.last_update_time + 10)
    await served.append_event(session, first)
    session.last_update_time -= 0.0001  # a float round trip that changes no revision
    await served.append_event(
        session, Event(invocation_id="inv2", author="user", timestamp=first.timestamp + 10)
    )
    got = await served.get_session(app_name=APP, user_id=USER, session_id="s1")
    assert got is not None and [e.invocation_id for e in got.events] == ["inv1", "inv2"]


async def test_get_session_with_config_small_timestamps(
    session_service: BaseSessionService,
) -> None:
    """ADK's own case: events at timestamps 1..5 (seconds since the epoch)."""
    session = await session_service.create_session(app_name=APP, user_id=USER)
    for i in range(1, 6):
        await session_service.append_event(session, Event(author="user", timestamp=i))

    async def stamps(config: GetSessionConfig | None = None) -> list[float]:
        got = await session_service.get_session(
            app_name=APP, user_id=USER, session_id=session.id, config=config
        )
        assert got is not None
        return [e.timestamp for e in got.events]

    assert await stamps() == [1, 2, 3, 4, 5]
    assert await stamps(GetSessionConfig(num_recent_events=3)) == [3, 4, 5]
    assert await stamps(GetSessionConfig(after_timestamp=4.0)) == [4, 5]
    assert await stamps(GetSessionConfig(after_timestamp=50)) == []
    assert await stamps(GetSessionConfig(after_timestamp=4.0, num_recent_events=3)) == [4, 5]


async def test_user_state_written_by_events(served: BaseSessionService) -> None:
    session = await served.create_session(app_name=APP, user_id="u1")
    await served.append_event(
        session,
        Event(author="system", actions=EventActions(
            state_delta={"user:profile": {"name": "Alice"}, "session_key": 1})),
    )  # fmt: skip
    await served.append_event(
        session, Event(author="system", actions=EventActions(state_delta={"user:counter": 2}))
    )
    assert await served.get_user_state(app_name=APP, user_id="u1") == {
        "profile": {"name": "Alice"}, "counter": 2
    }  # fmt: skip
    assert await served.get_user_state(app_name=APP, user_id="u2") == {}
    assert await served.get_user_state(app_name="other_app", user_id="u1") == {}


async def test_session_id_already_exists(session_service: BaseSessionService) -> None:
    await session_service.create_session(app_name=APP, user_id=USER, session_id="s1")
    with pytest.raises(AlreadyExistsError):
        await session_service.create_session(app_name=APP, user_id=USER, session_id="s1")


async def test_session_of_another_user_or_app_is_not_found(
    session_service: BaseSessionService,
) -> None:
    await session_service.create_session(app_name=APP, user_id=USER, session_id="s1")
    assert await session_service.get_session(app_name=APP, user_id="other", session_id="s1") is None
    await session_service.delete_session(app_name=APP, user_id="other", session_id="s1")
    assert await session_service.get_session(app_name=APP, user_id=USER, session_id="s1")


async def test_app_state_is_shared_by_all_users_of_app(session_service: BaseSessionService) -> None:
    s1 = await session_service.create_session(
        app_name=APP, user_id="u1", session_id="s1", state={"app:k1": "v1"}
    )
    event = Event(
        invocation_id="inv1", author="user", actions=EventActions(state_delta={"app:k2": "v2"})
    )
    await session_service.append_event(session=s1, event=event)
    s2 = await session_service.create_session(app_name=APP, user_id="u2", session_id="s2")
    assert s2.state == {"app:k1": "v1", "app:k2": "v2"}
    got = await session_service.get_session(app_name=APP, user_id="u1", session_id="s1")
    assert got is not None and got.state == {"app:k1": "v1", "app:k2": "v2"}
    other = await session_service.create_session(app_name="other_app", user_id="u1")
    assert other.state == {}


async def test_user_state_is_shared_by_sessions_of_user(
    session_service: BaseSessionService,
) -> None:
    s1 = await session_service.create_session(
        app_name=APP, user_id="u1", session_id="s1", state={"user:k1": "v1"}
    )
    event = Event(
        invocation_id="inv1", author="user", actions=EventActions(state_delta={"user:k2": "v2"})
    )
    await session_service.append_event(session=s1, event=event)
    s2 = await session_service.create_session(app_name=APP, user_id="u1", session_id="s2")
    assert s2.state == {"user:k1": "v1", "user:k2": "v2"}
    s3 = await session_service.create_session(app_name=APP, user_id="u2", session_id="s3")
    assert s3.state == {}


async def test_session_state_is_not_shared(session_service: BaseSessionService) -> None:
    s1 = await session_service.create_session(
        app_name=APP, user_id="u1", session_id="s1", state={"sk1": "v1"}
    )
    await session_service.append_event(
        s1, Event(invocation_id="i", author="user", actions=EventActions(state_delta={"sk2": "v2"}))
    )
    got = await session_service.get_session(app_name=APP, user_id="u1", session_id="s1")
    assert got is not None and got.state == {"sk1": "v1", "sk2": "v2"}
    s2 = await session_service.create_session(app_name=APP, user_id="u1", session_id="s2")
    assert s2.state == {}


async def test_temp_state_is_not_persisted_but_seen_by_the_invocation(
    session_service: BaseSessionService,
) -> None:
    session = await session_service.create_session(app_name=APP, user_id=USER)
    event = Event(
        invocation_id="inv",
        author="agent",
        actions=EventActions(state_delta={"temp:k": "t", "k": "v"}),
    )
    await session_service.append_event(session, event)
    assert session.state["temp:k"] == "t"  # the running invocation sees it
    got = await session_service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert got is not None
    assert got.state == {"k": "v"}
    assert got.events[-1].actions.state_delta == {"k": "v"}


async def test_create_session_with_temp_state_drops_it(session_service: BaseSessionService) -> None:
    session = await session_service.create_session(
        app_name=APP, user_id=USER, state={"temp:k": "t", "k": "v"}
    )
    got = await session_service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert got is not None and "temp:k" not in got.state and got.state["k"] == "v"


async def test_append_event_complete(session_service: BaseSessionService) -> None:
    session = await session_service.create_session(app_name=APP, user_id=USER)
    event = Event(
        invocation_id="invocation",
        author="user",
        content=types.Content(role="user", parts=[types.Part(text="test_text")]),
        turn_complete=True,
        partial=False,
        actions=EventActions(
            artifact_delta={"file": 0},
            transfer_to_agent="agent",
            escalate=True,
        ),
        long_running_tool_ids={"tool1"},
        error_code="error_code",
        error_message="error_message",
        interrupted=True,
        custom_metadata={"custom_key": "custom_value"},
        citation_metadata=types.CitationMetadata(citations=[types.Citation(title="t", uri="u")]),
        usage_metadata=types.GenerateContentResponseUsageMetadata(
            prompt_token_count=1, candidates_token_count=1, total_token_count=2
        ),
    )
    await session_service.append_event(session=session, event=event)
    got = await session_service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert got is not None and got.events == [event]


async def test_partial_event_is_not_stored(session_service: BaseSessionService) -> None:
    session = await session_service.create_session(app_name=APP, user_id=USER)
    event = _text("agent", "typing...", partial=True)
    assert await session_service.append_event(session, event) is event
    got = await session_service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert got is not None and got.events == []


async def test_get_session_with_config(session_service: BaseSessionService) -> None:
    num_events = 5
    session = await session_service.create_session(app_name=APP, user_id=USER)
    start = 1_700_000_000.0
    for i in range(1, num_events + 1):
        await session_service.append_event(session, _text("user", f"e{i}", timestamp=start + i))

    async def events(config: GetSessionConfig) -> list[str]:
        got = await session_service.get_session(
            app_name=APP, user_id=USER, session_id=session.id, config=config
        )
        assert got is not None
        return [e.content.parts[0].text for e in got.events]  # type: ignore[index,union-attr]

    assert await events(GetSessionConfig(num_recent_events=3)) == ["e3", "e4", "e5"]
    assert await events(GetSessionConfig(num_recent_events=0)) == []
    assert await events(GetSessionConfig(num_recent_events=99)) == [f"e{i}" for i in range(1, 6)]
    assert await events(GetSessionConfig(after_timestamp=start + 4)) == ["e4", "e5"]
    assert await events(GetSessionConfig(after_timestamp=start + 3.5)) == ["e4", "e5"]
    assert await events(GetSessionConfig(num_recent_events=1, after_timestamp=start + 2)) == ["e5"]
    assert await events(GetSessionConfig(after_timestamp=start + 99)) == []


async def test_get_session_config_refuses_negative() -> None:
    with pytest.raises(ValueError, match="num_recent_events"):
        GetSessionConfig(num_recent_events=-1)


async def test_function_call_and_response_round_trip(session_service: BaseSessionService) -> None:
    session = await session_service.create_session(app_name=APP, user_id=USER)
    call = Event(
        invocation_id="inv",
        author="agent",
        content=types.Content(
            role="model",
            parts=[
                types.Part(text="thinking it over", thought=True, thought_signature=b"\x00sig"),
                types.Part(function_call=types.FunctionCall(id="c1", name="f", args={"a": 1})),
                types.Part(function_call=types.FunctionCall(id="c2", name="g", args={})),
            ],
        ),
    )
    results = Event(
        invocation_id="inv",
        author="agent",
        content=types.Content(
            role="user",
            parts=[
                types.Part(
                    function_response=types.FunctionResponse(id="c1", name="f", response={"r": 1})
                ),
                types.Part(
                    function_response=types.FunctionResponse(
                        id="c2", name="g", response={"error": "x"}
                    )
                ),
            ],
        ),
        actions=EventActions(state_delta={"k": [1, {"n": None}]}, artifact_delta={"f.txt": 2}),
    )
    await session_service.append_event(session, call)
    await session_service.append_event(session, results)
    got = await session_service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert got is not None and got.events == [call, results]
    recent = await session_service.get_session(
        app_name=APP, user_id=USER, session_id=session.id,
        config=GetSessionConfig(num_recent_events=1),
    )  # fmt: skip
    assert recent is not None and recent.events == [results]


async def test_delete_missing_session_is_quiet(session_service: BaseSessionService) -> None:
    await session_service.delete_session(app_name=APP, user_id=USER, session_id="nothing")


async def test_get_user_state_of_a_user_without_state(
    session_service: BaseSessionService,
) -> None:
    assert await session_service.get_user_state(app_name=APP, user_id="u1") == {}


async def test_get_user_state_answers_keys_without_their_prefix(
    session_service: BaseSessionService,
) -> None:
    """Written at creation or by an event: only the ``user:`` keys, prefix removed."""
    await session_service.create_session(
        app_name=APP, user_id="u1", state={"user:lang": "fr", "k": 1, "app:a": 2}
    )
    session = await session_service.create_session(app_name=APP, user_id="u1")
    delta = {"user:profile": {"name": "Ada"}, "session_key": 1, "app:b": 3}
    await session_service.append_event(
        session, Event(author="system", actions=EventActions(state_delta=delta))
    )
    assert await session_service.get_user_state(app_name=APP, user_id="u1") == {
        "lang": "fr",
        "profile": {"name": "Ada"},
    }


async def test_get_user_state_is_kept_per_user_and_per_app(
    session_service: BaseSessionService,
) -> None:
    session = await session_service.create_session(app_name=APP, user_id="u1")
    delta = EventActions(state_delta={"user:secret": "only-u1-in-my_app"})
    await session_service.append_event(session, Event(author="system", actions=delta))
    assert await session_service.get_user_state(app_name=APP, user_id="u2") == {}
    assert await session_service.get_user_state(app_name="other_app", user_id="u1") == {}
    assert await session_service.get_user_state(app_name=APP, user_id="u1") == {
        "secret": "only-u1-in-my_app"
    }


async def test_get_user_state_needs_no_session_and_shows_the_latest_write(
    session_service: BaseSessionService,
) -> None:
    """Read by app and user only (a new session of the user need not exist yet), and each
    write replaces the key's value."""
    session = await session_service.create_session(app_name=APP, user_id="u1")
    for value in (1, 2):
        delta = EventActions(state_delta={"user:counter": value, "user:ctx": {"v": value}})
        await session_service.append_event(session, Event(author="system", actions=delta))
    assert await session_service.get_user_state(app_name=APP, user_id="u1") == {
        "counter": 2,
        "ctx": {"v": 2},
    }


async def test_temp_state_is_seen_by_later_events_and_trimmed_from_the_event(
    session_service: BaseSessionService,
) -> None:
    """One agent of an invocation writes ``temp:`` state, the next reads it from the same
    session object; the appended event's own delta loses the ``temp:`` key."""
    session = await session_service.create_session(app_name=APP, user_id=USER)
    first = Event(
        invocation_id="inv",
        author="agent1",
        actions=EventActions(state_delta={"temp:output": "from a1", "sk": "v"}),
    )
    await session_service.append_event(session, first)
    assert session.state["temp:output"] == "from a1" and session.state["sk"] == "v"
    assert first.actions.state_delta == {"sk": "v"}
    second = Event(invocation_id="inv", author="agent2")
    await session_service.append_event(session, second)
    assert session.state["temp:output"] == "from a1"
    got = await session_service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert got is not None and "temp:output" not in got.state


async def test_concurrent_first_creates_all_succeed(session_service: BaseSessionService) -> None:
    """The first requests to a fresh store, at once, for different apps: each one is
    created and can be read back (ADK's case against a table-creation race)."""
    created = await asyncio.gather(
        *(
            session_service.create_session(app_name=f"app_{i}", user_id="user", session_id=f"s{i}")
            for i in range(5)
        )
    )
    assert [s.id for s in created] == [f"s{i}" for i in range(5)]
    for i in range(5):
        got = await session_service.get_session(
            app_name=f"app_{i}", user_id="user", session_id=f"s{i}"
        )
        assert got is not None and got.app_name == f"app_{i}"


async def test_sessions_of_two_users_of_one_app(session_service: BaseSessionService) -> None:
    one = await session_service.create_session(app_name="shared", user_id="u1", session_id="s1")
    two = await session_service.create_session(app_name="shared", user_id="u2", session_id="s2")
    assert (one.app_name, two.app_name) == ("shared", "shared")
    for user, sid in (("u1", "s1"), ("u2", "s2")):
        got = await session_service.get_session(app_name="shared", user_id=user, session_id=sid)
        assert got is not None and got.user_id == user


async def test_append_through_the_object_get_session_answered(
    session_service: BaseSessionService,
) -> None:
    """An event appended through the session object a read answered is stored once."""
    created = await session_service.create_session(app_name=APP, user_id=USER)
    read = await session_service.get_session(app_name=APP, user_id=USER, session_id=created.id)
    assert read is not None
    await session_service.append_event(session=read, event=Event(invocation_id="i", author="user"))
    assert len(read.events) == 1
    got = await session_service.get_session(app_name=APP, user_id=USER, session_id=created.id)
    assert got is not None and len(got.events) == 1


async def test_runner_rewind(session_service: BaseSessionService) -> None:
    """ADK 2.13 rewinds in the ``Runner`` (``rewind_async``: one more event whose deltas
    undo the later ones), through ``get_session`` and ``append_event`` only."""
    from google.adk.agents import LlmAgent
    from google.adk.runners import Runner

    runner = Runner(
        app_name=APP,
        agent=LlmAgent(name="agent", model="gemini-2.5-flash"),
        session_service=session_service,
    )
    session = await session_service.create_session(app_name=APP, user_id=USER, state={"a": 0})
    for i in (1, 2, 3):
        await session_service.append_event(
            session,
            Event(invocation_id=f"inv-{i}", author="user",
                  content=types.Content(role="user", parts=[types.Part(text=f"turn {i}")]),
                  actions=EventActions(state_delta={"a": i, f"k{i}": i})),
        )  # fmt: skip
    await runner.rewind_async(
        user_id=USER, session_id=session.id, rewind_before_invocation_id="inv-2"
    )
    got = await session_service.get_session(app_name=APP, user_id=USER, session_id=session.id)
    assert got is not None
    assert [e.invocation_id for e in got.events][:3] == ["inv-1", "inv-2", "inv-3"]
    assert got.events[-1].actions.rewind_before_invocation_id == "inv-2"
    assert got.state["a"] == 1 and got.state["k1"] == 1
    assert got.state.get("k2") is None and got.state.get("k3") is None
