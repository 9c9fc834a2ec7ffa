"""``SessionServerMemoryService.search_memory`` over ``memory.search`` (FTS5).

The search cases of google-adk's ``tests/unittests/memory/test_in_memory_memory_service.py``
that describe any memory service (a match, case, several matches, no match, scoping by
user, a slash in identifiers, at most ``limit``) are here, written anew. Its cases of the
in-memory service's own keyword rules (substring fallback for unspaced scripts, ranking
by the number of matching words, partial-word refusals) describe that service's matching,
not FTS5's, and are not (``docs/adk-conformance.md`` lists every case).
"""

from __future__ import annotations

import asyncio
import threading
import unicodedata
from pathlib import Path

import pytest
from google.adk.events.event import Event
from google.adk.sessions.session import Session
from google.genai import types

from session_server.integrations.adk import SessionServerMemoryService, SessionServerSessionService
from tests.session_server.integrations.adk.conftest import AGENT
from tests.support.server import running_server
from tests.support.waiting import DEADLINE_S

APP = "app"


def said(author: str, text: str) -> Event:
    role = "user" if author == "user" else "model"
    return Event(
        invocation_id="inv",
        author=author,
        content=types.Content(role=role, parts=[types.Part(text=text)]),
    )


async def test_search_memory_finds_the_users_own_events(tmp_path: Path) -> None:
    async with running_server(tmp_path / "memory") as server:
        sessions = SessionServerSessionService(url=server.url, agent_id=AGENT)
        memory = SessionServerMemoryService(url=server.url, agent_id=AGENT)
        mine = await sessions.create_session(app_name=APP, user_id="ada")
        theirs = await sessions.create_session(app_name=APP, user_id="bob")
        other_app = await sessions.create_session(app_name="other", user_id="ada")
        kept = said("user", "my cat is called Pixel")
        await sessions.append_event(mine, kept)
        await sessions.append_event(mine, said("agent", "noted"))
        await sessions.append_event(theirs, said("user", "my cat is called Nova"))
        await sessions.append_event(other_app, said("user", "another cat called Zed"))
        await memory.add_session_to_memory(mine)  # already stored: nothing to copy

        async def found() -> list[str]:
            response = await memory.search_memory(app_name=APP, user_id="ada", query="cat")
            return [m.id or "" for m in response.memories]

        deadline = asyncio.get_running_loop().time() + DEADLINE_S
        while (ids := await found()) != [kept.id]:  # the index may still be building
            assert asyncio.get_running_loop().time() < deadline, ids
            await asyncio.sleep(0.05)
        response = await memory.search_memory(app_name=APP, user_id="ada", query="cat")
        [entry] = response.memories
        assert entry.content == kept.content and entry.author == "user"
        assert entry.custom_metadata["session_id"] == mine.id
        assert entry.custom_metadata["seq"] == 1
        assert "Pixel" in str(entry.custom_metadata["snippet"])
        assert (
            await memory.search_memory(app_name=APP, user_id="ada", query="giraffe")
        ).memories == []
        await sessions.close()
        await memory.close()


def session_of(user: str, session_id: str, *texts: tuple[str, str]) -> Session:
    return Session(
        app_name=APP,
        user_id=user,
        id=session_id,
        events=[
            Event(
                id=f"{session_id}-{i}",
                invocation_id=f"inv-{i}",
                author=author,
                timestamp=12345.0 + i,
                content=types.Content(parts=[types.Part(text=text)]),
            )
            for i, (author, text) in enumerate(texts)
        ],
    )


async def search(memory: SessionServerMemoryService, user: str, query: str) -> list[str]:
    deadline = asyncio.get_running_loop().time() + DEADLINE_S
    while True:
        result = await memory.search_memory(app_name=APP, user_id=user, query=query)
        texts = [m.content.parts[0].text or "" for m in result.memories if m.content.parts]
        if texts or asyncio.get_running_loop().time() > deadline:
            return texts
        await asyncio.sleep(0.05)


async def test_search_memory_cases_of_adk(tmp_path: Path) -> None:
    async with running_server(tmp_path / "memory") as server:
        memory = SessionServerMemoryService(url=server.url, agent_id=AGENT)
        await memory.add_session_to_memory(
            session_of("u1", "s1", ("user", "The ADK is a great toolkit."),
                       ("model", "I agree. The Agent Development Kit (ADK) rocks!"))
        )  # fmt: skip
        await memory.add_session_to_memory(
            session_of("u1", "s2", ("user", "I like to code in Python."))
        )
        await memory.add_session_to_memory(session_of("u2", "s3", ("user", "This is a secret.")))
        assert await search(memory, "u1", "Python") == ["I like to code in Python."]
        assert await search(memory, "u1", "development") == [
            "I agree. The Agent Development Kit (ADK) rocks!"
        ]
        assert set(await search(memory, "u1", "ADK")) == {
            "The ADK is a great toolkit.", "I agree. The Agent Development Kit (ADK) rocks!"
        }  # fmt: skip
        assert (
            await memory.search_memory(app_name=APP, user_id="u1", query="nonexistent")
        ).memories == []
        assert (
            await memory.search_memory(app_name=APP, user_id="u1", query="secret")
        ).memories == []
        assert await search(memory, "u2", "secret") == ["This is a secret."]
        slashed = Session(app_name="app/other-user", user_id="user", id="x", events=[
            Event(id="e", invocation_id="i", author="user", timestamp=1.0,
                  content=types.Content(parts=[types.Part(text="This is a secret.")]))])  # fmt: skip
        await memory.add_session_to_memory(slashed)
        found = await memory.search_memory(
            app_name="app", user_id="other-user/user", query="secret"
        )
        assert found.memories == []
        many = session_of("u1", "s5", *[("user", f"note {i} about work") for i in range(20)])
        await memory.add_session_to_memory(many)
        assert len(await search(memory, "u1", "work")) == 10
        await memory.close()


def jasmine_session() -> Session:
    return session_of("u1", "tea", ("user", "I prefer jasmine tea."))


@pytest.mark.parametrize("ingest_session", [True, False])
async def test_memories_are_copies(tmp_path: Path, ingest_session: bool) -> None:
    """Changing an ingested event does not change the memory, and changing a search
    result changes neither the next search nor the session it came from."""
    async with running_server(tmp_path / "memory") as server:
        memory = SessionServerMemoryService(registry=server.registry, agent_id=AGENT)
        session = jasmine_session()
        if ingest_session:
            await memory.add_session_to_memory(session)
        else:
            await memory.add_events_to_memory(
                app_name=APP, user_id="u1", session_id=session.id, events=session.events
            )
        event = session.events[0]
        event.author = "changed"
        assert event.content is not None and event.content.parts
        event.content.parts[0].text = "I prefer coffee."
        assert await search(memory, "u1", "jasmine") == ["I prefer jasmine tea."]
        first = await memory.search_memory(app_name=APP, user_id="u1", query="jasmine")
        assert first.memories[0].author == "user"
        first.memories[0].content.parts.clear()
        assert await search(memory, "u1", "jasmine") == ["I prefer jasmine tea."]
        assert await search(memory, "u1", "coffee") == []
        await memory.close()


async def test_search_while_other_threads_add(tmp_path: Path) -> None:
    """One service object used from threads with event loops of their own (a writer
    adding sessions, two readers searching) raises nothing, and every fact is found."""
    async with running_server(tmp_path / "memory") as server:
        memory = SessionServerMemoryService(url=server.url, agent_id=AGENT)
        await memory.add_session_to_memory(session_of("u1", "seed", ("user", "fact about seed")))
        errors: list[BaseException] = []
        barrier = threading.Barrier(3)

        def writer() -> None:
            barrier.wait()
            try:
                for i in range(20):
                    facts = session_of("u1", f"w{i}", ("user", f"fact about w{i}"))
                    asyncio.run(memory.add_session_to_memory(facts))
            except BaseException as exc:
                errors.append(exc)

        def reader() -> None:
            barrier.wait()
            try:
                for _ in range(20):
                    asyncio.run(memory.search_memory(app_name=APP, user_id="u1", query="fact"))
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=f) for f in (writer, reader, reader)]
        for thread in threads:
            thread.start()
        await asyncio.to_thread(lambda: [t.join() for t in threads])
        assert errors == []
        assert await search(memory, "u1", "w19") == ["fact about w19"]
        await memory.close()


@pytest.mark.parametrize(
    ("text", "query", "found"),
    [
        ("제 이름은 민수입니다", "민수입니다", True),  # Korean: words between spaces
        ("Меня зовут Алексей", "Алексей", True),
        ("太郎 works at ABC Corp", "太郎", True),
        ("太郎 works at ABC Corp", "abc", True),
        ("I like to code in Python.", "thon", False),  # no partial words
        (unicodedata.normalize("NFD", "Meet at the Café"), "Café", True),
        ("Meet at the Café", unicodedata.normalize("NFD", "Café"), True),
        ("I like to code in Python.", "Java", False),
    ],
)
async def test_search_memory_words_of_any_script(
    tmp_path: Path, text: str, query: str, found: bool
) -> None:
    """ADK's non-Latin cases that describe word search (its substring fallback for
    unspaced scripts is the in-memory service's own rule, not FTS5's)."""
    async with running_server(tmp_path / "memory") as server:
        memory = SessionServerMemoryService(registry=server.registry, agent_id=AGENT)
        await memory.add_session_to_memory(session_of("u1", "i18n", ("user", text)))
        await memory.add_session_to_memory(session_of("u1", "probe", ("user", "probe words")))
        assert await search(memory, "u1", "probe") == ["probe words"]  # the index has both
        result = await memory.search_memory(app_name=APP, user_id="u1", query=query)
        assert [m.content.parts[0].text for m in result.memories] == ([text] if found else [])
        await memory.close()
