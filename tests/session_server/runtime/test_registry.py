"""Registry: one actor per agent, hibernation, the open-file bound, bad agent ids and files."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

from session_server import ActorRegistry
from session_server.values.errors import AgentUnavailableError, InvalidAgentIdError
from session_server.values.events import SessionEvent


def open_sqlite_fds() -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.endswith((".sqlite", ".sqlite-wal", ".sqlite-shm")):
            count += 1
    return count


async def test_one_actor_per_agent(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path) as reg:
        assert await reg.get("a") is await reg.get("a")
        assert await reg.get("a") is not await reg.get("b")


async def test_idle_actors_hibernate_and_reopen(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=3600) as reg:
        actor = await reg.get("sleepy")
        sid = await actor.create_session()
        assert actor.is_open and reg.open_count == 1
        await actor.recall_settled()  # the activation's search-index check is done
        assert await reg.hibernate_idle(older_than=-1) == 1
        assert not actor.is_open and reg.open_count == 0
        # the next call re-opens transparently
        await actor.append_events(sid, [SessionEvent(action="user_message", content="hi")])
        assert actor.is_open
        assert [e.content for e in await actor.load_events(sid)] == ["hi"]


async def test_open_files_stay_under_the_bound(tmp_path: Path) -> None:
    # Connections an earlier test dropped without closing are closed by the collector,
    # possibly in the middle of this test: collect them before counting.
    gc.collect()
    baseline = open_sqlite_fds()
    async with ActorRegistry(tmp_path, max_open=8, idle_timeout=None) as reg:
        for i in range(60):
            actor = await reg.get(f"agent-{i}")
            sid = await actor.create_session()
            await actor.load_events(sid)
            assert reg.open_count <= 8
        # wal + shm + db per connection, two connections per open store
        assert open_sqlite_fds() - baseline <= 8 * 6
        # an evicted agent still works
        first = await reg.get("agent-0")
        assert len(await first.list_sessions()) == 1
    assert open_sqlite_fds() == baseline


@pytest.mark.parametrize(
    "bad",
    ["", "a/b", "a\\b", "..", "x..y", ".", "nul\x00", "tab\tid", "x" * 129, "é" * 65],
)
async def test_invalid_agent_ids_touch_no_file(tmp_path: Path, bad: str) -> None:
    async with ActorRegistry(tmp_path / "mem") as reg:
        with pytest.raises(InvalidAgentIdError, match="agent_id"):
            await reg.get(bad)
    assert not (tmp_path / "mem").exists()


async def test_spaces_are_allowed(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path) as reg:
        actor = await reg.get("db manager_db manager_1393")
        await actor.create_session()
        assert reg.list_agents() == ["db manager_db manager_1393"]


async def test_corrupt_file_fails_only_that_agent(tmp_path: Path) -> None:
    bad_dir = tmp_path / "agents" / "broken"
    bad_dir.mkdir(parents=True)
    (bad_dir / "agent.sqlite").write_bytes(b"this is not a sqlite database" * 100)
    async with ActorRegistry(tmp_path) as reg:
        broken = await reg.get("broken")
        with pytest.raises(AgentUnavailableError, match="broken"):
            await broken.list_sessions()
        healthy = await reg.get("healthy")
        sid = await healthy.create_session()
        assert (await healthy.get_session(sid)) is not None
        with pytest.raises(AgentUnavailableError):
            await broken.create_session()


def test_misused_options_are_refused_as_python_errors(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="max_opne"):
        ActorRegistry(tmp_path, max_opne=3)  # type: ignore[call-arg]  # a typo is refused
    with pytest.raises(ValueError, match="max_open"):
        ActorRegistry(tmp_path, max_open=0)
    with pytest.raises(TypeError, match="context_limit"):
        ActorRegistry(tmp_path, context_limit="200")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="idle_timeout"):
        ActorRegistry(tmp_path, idle_timeout="soon")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="default_strategy"):
        ActorRegistry(tmp_path, default_strategy={"mode": "sometimes"})


async def test_a_closed_registry_refuses_with_a_distinct_error(tmp_path: Path) -> None:
    reg = ActorRegistry(tmp_path)
    await reg.close()
    with pytest.raises(AgentUnavailableError, match="closed"):
        await reg.get("a")


async def test_an_id_that_is_not_a_string_is_refused_while_actors_are_open(tmp_path: Path) -> None:
    """``get`` looks an open actor up before validating (every key is a validated id);
    an id that is not a string, even an unhashable one, still gets the validation's
    refusal, and an open actor is still found by its NFD spelling."""
    async with ActorRegistry(tmp_path, idle_timeout=None, mirror=False) as reg:
        actor = await reg.get("café")
        await actor.create_session()
        for bad in (["café"], 7, None):
            with pytest.raises(InvalidAgentIdError, match="must be a string"):
                await reg.get(bad)  # type: ignore[arg-type]
        assert await reg.get("cafe\u0301") is actor
