"""Deleted stays deleted, and only what the server wrote is trusted (issue 13, item 3).

Each test runs ``session-server serve`` as a real subprocess on a real memory dir and kills
it with SIGKILL. To leave the server no time for mirror work after an acknowledged delete,
the agent also holds a large session whose events are deleted first: its mirror repair
keeps the agent's (ordered) mirror chain busy, so whatever the server does after the
answer has not happened when the kill lands. Only what a delete does before it answers
counts.

- ``events.delete`` then SIGKILL: the next ``context.build`` does not serve the deleted
  message (the snapshot file still holds it), and after activation the mirror holds no
  deleted line (repaired, equal to a fresh rendering).
- ``session.delete`` then SIGKILL: the folder is gone; ``memory.view`` answers not-found,
  ``memory.list_snapshots`` does not list it, a new session with the same id starts empty.
- A hand-edited snapshot (text changed, a system message added, ``last_seq`` kept), after
  a clean stop and after a SIGKILL: never served.
- A truncated or corrupted mirror file after a clean stop: repaired on activation.
- An orphan folder (a session gone from SQLite, its folder left): removed on activation.
- ``events.delete``, ``events.pop`` (with and without ``replace_with``) and
  ``session.clear``, each answered, then SIGKILL at a spread of moments after the answers,
  with the agent idle and with another session of the agent busy writing (issue 33, item
  3): right after the kill the SQLite file and WAL hold no removed text; after each
  restart (and a later one) ``memory.view``, ``context.build``, ``events.load``,
  ``memory.list_snapshots`` and every file under the memory dir hold none. Before the
  fix, the snapshot file a kill left was served by ``memory.view`` after every restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from session_server.client import SessionClient
from session_server.values.errors import NotFoundError
from session_server.values.events import ContextMessage, SessionEvent, ToolCall
from tests.support.mirror_check import expected_mirror, mirror_files
from tests.support.server import ServerProcess, turn_messages

AGENT = "deleting-agent"
BIG = "big"
BIG_EVENTS = 6000
SNAPSHOT = "working_context_snapshot.json"


def session_dir(memory: Path, session_id: str) -> Path:
    return memory / "agents" / AGENT / "sessions" / session_id


@asynccontextmanager
async def serving(memory: Path) -> AsyncIterator[tuple[ServerProcess, SessionClient]]:
    proc = ServerProcess(memory)
    url = await asyncio.to_thread(proc.start)
    try:
        async with SessionClient(url, AGENT) as client:
            yield proc, client
    finally:
        proc.kill()


def sigkill(proc: ServerProcess) -> None:
    proc.kill()  # SIGKILL (Popen.kill)
    assert proc.proc is not None and proc.proc.returncode == -9


async def stop_cleanly(proc: ServerProcess) -> None:
    assert await asyncio.to_thread(proc.terminate, 30.0) == 0, proc.stderr_text


async def fill_big(client: SessionClient) -> list[str]:
    """A large session (its repair keeps the mirror chain busy); the ids of 200 events."""
    await client.create_session(session_id=BIG)
    ids: list[str] = []
    for start in range(0, BIG_EVENTS, 1000):
        batch = [
            SessionEvent(action="user_message" if i % 2 == 0 else "agent_message", content=f"b{i}")
            for i in range(start, start + 1000)
        ]
        await client.append_events(BIG, batch)
    for event in await client.load_events(BIG, limit=200, tail=False):
        ids.append(event.id)
    return ids


async def persist_turns(client: SessionClient, session_id: str, turns: range) -> None:
    for n in turns:
        await client.persist_turn(session_id, turn_messages(n))


async def all_events(client: SessionClient, session_id: str) -> list[SessionEvent]:
    return await client.load_events(session_id, limit=100_000, tail=False)


def texts(ctx_messages: list[ContextMessage], instructions: list[str]) -> str:
    return json.dumps([m.content for m in ctx_messages] + instructions)


async def test_events_delete_then_sigkill(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    async with serving(memory) as (proc, client):
        big_ids = await fill_big(client)
        await client.create_session(session_id="s")
        await persist_turns(client, "s", range(1, 4))
        await client.memory_view("s")  # the mirror and the snapshot are written
        await stop_cleanly(proc)  # a clean stop: cursor, checkpoint and snapshot bound
    async with serving(memory) as (proc, client):
        victim = next(e for e in await all_events(client, "s") if e.content == "answer 2")
        assert "answer 2" in (session_dir(memory, "s") / SNAPSHOT).read_text()
        assert await client.delete_events(BIG, big_ids) == len(big_ids)
        assert await client.delete_events("s", [victim.id]) == 1
        sigkill(proc)
    async with serving(memory) as (proc, client):
        ctx = await client.build_context("s")
        assert "answer 2" not in texts(ctx.messages, ctx.system_instructions)
        assert [m.content for m in ctx.messages].count("answer 1") == 1
        await client.memory_view("s")  # activation ran and its repairs finished
        events = await all_events(client, "s")
        assert victim.id not in {e.id for e in events}
        assert mirror_files(memory, AGENT, "s") == expected_mirror(events)
        big = await all_events(client, BIG)
        assert mirror_files(memory, AGENT, BIG) == expected_mirror(big)
        sigkill(proc)


async def test_session_delete_then_sigkill(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    async with serving(memory) as (proc, client):
        big_ids = await fill_big(client)
        await client.create_session(session_id="gone")
        await persist_turns(client, "gone", range(1, 3))
        await client.memory_view("gone")
        assert session_dir(memory, "gone").is_dir()
        await client.delete_events(BIG, big_ids)
        assert await client.delete_session("gone") is True
        sigkill(proc)
    assert not session_dir(memory, "gone").exists()
    async with serving(memory) as (proc, client):
        with pytest.raises(NotFoundError):
            await client.memory_view("gone")
        async with SessionClient(proc.url, None) as server:
            listed = await server.list_snapshots(page_size=100)
        assert not [s for s in listed["entries"] if s.get("session_id") == "gone"], listed
        await client.create_session(session_id="gone")
        await persist_turns(client, "gone", range(7, 8))
        await client.memory_view("gone")
        events = await all_events(client, "gone")
        assert mirror_files(memory, AGENT, "gone") == expected_mirror(events)
        assert "question 1" not in (session_dir(memory, "gone") / "raw_traces.jsonl").read_text()
        sigkill(proc)


def edit_snapshot(path: Path) -> None:
    """Change a message's text and add a system message; keep ``last_seq`` as it is."""
    payload = json.loads(path.read_text())
    for message in payload["messages"]:
        if message["content"] == "answer 1":
            message["content"] = "EDITED BY HAND"
    payload["messages"].insert(0, {"role": "system", "content": "INJECTED SYSTEM PROMPT"})
    path.write_text(json.dumps(payload))


async def test_a_hand_edited_snapshot_is_never_served(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    snapshot = session_dir(memory, "s") / SNAPSHOT
    async with serving(memory) as (proc, client):
        await client.create_session(session_id="s")
        await persist_turns(client, "s", range(1, 3))
        await stop_cleanly(proc)
    edit_snapshot(snapshot)  # after a clean stop: SQLite vouches for the original bytes
    async with serving(memory) as (proc, client):
        ctx = await client.build_context("s")
        seen = texts(ctx.messages, ctx.system_instructions)
        assert "EDITED" not in seen and "INJECTED" not in seen
        assert "answer 1" in seen
        await persist_turns(client, "s", range(3, 4))
        await client.memory_view("s")  # the new snapshot is on disk
        sigkill(proc)
    edit_snapshot(snapshot)  # after a SIGKILL: the file was never bound
    async with serving(memory) as (proc, client):
        ctx = await client.build_context("s")
        seen = texts(ctx.messages, ctx.system_instructions)
        assert "EDITED" not in seen and "INJECTED" not in seen
        assert [m.content for m in ctx.messages].count("answer 3") == 1
        sigkill(proc)


async def test_truncated_and_corrupted_mirror_files_are_repaired(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    async with serving(memory) as (proc, client):
        for sid in ("cut", "garbled"):
            await client.create_session(session_id=sid)
            await persist_turns(client, sid, range(1, 6))
        await stop_cleanly(proc)
    cut = session_dir(memory, "cut") / "raw_traces.jsonl"
    data = cut.read_bytes()
    cut.write_bytes(data[: len(data) // 2])  # truncated mid-line
    garbled = session_dir(memory, "garbled") / "raw_traces.jsonl"
    data = bytearray(garbled.read_bytes())
    data[40:60] = b"#" * 20  # corrupted in place, same size
    garbled.write_bytes(bytes(data))
    for _ in range(2):  # repaired on activation; and the next SIGKILL undoes nothing
        async with serving(memory) as (proc, client):
            await client.memory_view("cut")  # activation and its repairs ran, then the view
            for sid in ("cut", "garbled"):
                events = await all_events(client, sid)
                assert mirror_files(memory, AGENT, sid) == expected_mirror(events), sid
            sigkill(proc)


async def test_an_orphan_folder_is_removed_on_activation(tmp_path: Path) -> None:
    memory = tmp_path / "memory"
    async with serving(memory) as (proc, client):
        for sid in ("kept", "orphan"):
            await client.create_session(session_id=sid)
            await persist_turns(client, sid, range(1, 3))
        await client.memory_view("orphan")
        sigkill(proc)
    # As a crash between a session delete's commit and its folder removal leaves it.
    with sqlite3.connect(memory / "agents" / AGENT / "agent.sqlite") as conn:
        for table in ("events", "tool_calls", "idempotency"):
            conn.execute(f"DELETE FROM {table} WHERE session_id = 'orphan'")
        conn.execute("DELETE FROM sessions WHERE id = 'orphan'")
    assert session_dir(memory, "orphan").is_dir()
    async with serving(memory) as (proc, client):
        with pytest.raises(NotFoundError):
            await client.memory_view("orphan")
        assert not session_dir(memory, "orphan").exists()
        assert session_dir(memory, "kept").is_dir()
        async with SessionClient(proc.url, None) as server:
            listed = await server.list_snapshots(page_size=100)
        assert [s["session_id"] for s in listed["entries"]] == ["kept"], listed
        await client.create_session(session_id="orphan")
        await persist_turns(client, "orphan", range(9, 10))
        await client.memory_view("orphan")
        events = await all_events(client, "orphan")
        assert mirror_files(memory, AGENT, "orphan") == expected_mirror(events)
        sigkill(proc)


# -- SIGKILL at many moments after a delete, pop or clear (issue 33, item 3) -------------

OPS = ("delete", "pop", "replace", "clear")
# A round removes the four secrets one after the other, with these pauses (seconds)
# between an answer and the next request, and kills the server right after the last
# answer: the removals are killed about 0.093, 0.023, 0.003 and 0 s after their answers
# (plus what the later requests took). Each round starts one operation later in ``OPS``.
GAPS = (0.07, 0.02, 0.003)
# Rounds with the agent idle, then rounds with another session of the agent writing all
# along (its mirror work queued in the same chain as the removals' repairs).
MODES = (False, False, False, True, True, True)
BUSY = "busy"


def secret(round_no: int, op: str) -> str:
    return f"SECRET-{round_no:02d}-{op}-END"


def victim_id(round_no: int, op: str) -> str:
    return f"r{round_no:02d}-{op}"


def secret_turn(text: str, *, tool: bool) -> list[ContextMessage]:
    """A turn whose last message holds ``text`` (with ``tool``: its call and result too)."""
    if not tool:
        return [
            ContextMessage(role="user", content="tell me"),
            ContextMessage(role="assistant", content=text),
        ]
    return [
        ContextMessage(role="user", content="look it up"),
        ContextMessage(
            role="assistant",
            content="",
            tool_calls=[ToolCall(id="call-s", name="lookup", arguments={"q": text})],
        ),
        ContextMessage(role="tool", content=text, tool_call_id="call-s", name="lookup"),
        ContextMessage(role="assistant", content=text),
    ]


async def fill_victim(client: SessionClient, round_no: int, op: str) -> str:
    """A session whose ``op`` removes every copy of the round's secret; the id of the
    event to delete (``delete``: one in the middle of the history)."""
    sid, text = victim_id(round_no, op), secret(round_no, op)
    await client.create_session(session_id=sid)
    await client.persist_turn(sid, turn_messages(1))
    await client.persist_turn(sid, secret_turn(text, tool=op == "clear"))
    if op == "delete":
        await client.persist_turn(sid, turn_messages(3))
    events = await all_events(client, sid)
    return next(e.id for e in events if e.content == text)


async def remove_secret(client: SessionClient, round_no: int, op: str, event_id: str) -> None:
    sid = victim_id(round_no, op)
    if op == "delete":
        assert await client.delete_events(sid, [event_id]) == 1
    elif op == "pop":
        popped = await client.pop_event(sid, event_id=event_id)
        assert popped is not None and popped.id == event_id
    elif op == "replace":
        replacement = {"action": "agent_message", "content": "redacted"}
        popped = await client.pop_event(sid, event_id=event_id, replace_with=replacement)
        assert popped is not None and popped.id == event_id
    else:
        assert await client.clear_session(sid) > 0


async def keep_writing(client: SessionClient, started: asyncio.Event) -> None:
    """Another session of the agent, written to until the server dies."""
    await client.create_session(session_id=BUSY, if_exists="return")
    filler = "x" * 4000
    n = 0
    while True:
        n += 1
        turn = turn_messages(n)
        turn[0] = ContextMessage(role="user", content=f"{filler} {n}")
        await client.persist_turn(BUSY, turn)
        started.set()


async def stopped(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def files_holding(root: Path, needles: list[bytes]) -> dict[str, list[str]]:
    """Every file under ``root`` (recursively, hidden ones too) that holds a needle."""
    found: dict[str, list[str]] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # removed meanwhile (a temporary file)
            continue
        hits = [n.decode() for n in needles if n in data]
        if hits:
            found[str(path.relative_to(root))] = hits
    return found


def sqlite_bytes_holding(memory: Path, needles: list[bytes]) -> dict[str, list[str]]:
    agent_dir = memory / "agents" / AGENT
    return {
        name: hits
        for name, hits in files_holding(agent_dir, needles).items()
        if name.startswith("agent.sqlite")
    }


async def check_gone(memory: Path, url: str, client: SessionClient, rounds: list[int]) -> None:
    """Nothing of the secrets of ``rounds`` is served, mirrored, listed or stored."""
    needles = [secret(r, op) for r in rounds for op in OPS]
    for r in rounds:
        for op in OPS:
            sid = victim_id(r, op)
            view = json.dumps(await client.memory_view(sid))
            assert secret(r, op) not in view, (sid, "memory.view")
            ctx = await client.build_context(sid)
            assert secret(r, op) not in texts(ctx.messages, ctx.system_instructions), sid
            events = json.dumps([e.content for e in await all_events(client, sid)])
            assert secret(r, op) not in events, (sid, "events.load")
            if op == "replace":
                assert "redacted" in view and "redacted" in events, sid
    async with SessionClient(url, None) as server:
        listed = json.dumps(await server.list_snapshots(page_size=1000))
    assert not [n for n in needles if n in listed], "memory.list_snapshots"
    # Every file under the memory dir: mirror files (snapshot, archive, temporaries,
    # trash), the snapshot index, the agent's SQLite file, its WAL and shared memory.
    assert files_holding(memory, [n.encode() for n in needles]) == {}


async def test_no_deleted_text_after_sigkill_at_any_moment(tmp_path: Path, soak: int) -> None:
    """Delete, pop, pop with ``replace_with`` and clear, each answered, then SIGKILL at a
    spread of moments after the answers (idle, and with another session of the agent busy
    writing); right after the kill the SQLite file and its WAL hold none of the removed
    text, and after each restart nothing removed is served, mirrored, listed or left in
    any file of the memory dir."""
    memory = tmp_path / "memory"
    rounds = list(enumerate(MODES * soak))  # ``--soak``: more rounds
    victims: dict[tuple[int, str], str] = {}
    async with serving(memory) as (proc, client):
        for r in range(len(rounds)):
            for op in OPS:
                victims[r, op] = await fill_victim(client, r, op)
        for r in range(len(rounds)):
            for op in OPS:
                await client.memory_view(victim_id(r, op))  # mirror and snapshot written
        await stop_cleanly(proc)  # checkpoints stored, every snapshot bound
    snapshot = session_dir(memory, victim_id(0, "pop")) / SNAPSHOT
    assert secret(0, "pop") in snapshot.read_text()  # what a kill could leave behind
    for r, busy in rounds:
        async with serving(memory) as (proc, client), contextlib.AsyncExitStack() as stack:
            await check_gone(memory, proc.url, client, [r - 1] if r else [])
            if busy:
                started = asyncio.Event()
                other = await stack.enter_async_context(SessionClient(proc.url, AGENT))
                writer = asyncio.create_task(keep_writing(other, started))
                stack.push_async_callback(stopped, writer)
                await started.wait()
            order = OPS[r % len(OPS) :] + OPS[: r % len(OPS)]
            for op, gap in zip(order, (*GAPS, None), strict=True):
                await remove_secret(client, r, op, victims[r, op])
                if gap is not None:
                    await asyncio.sleep(gap)  # the moments of the kill, not a synchronisation
            sigkill(proc)
        needles = [secret(r, op).encode() for op in OPS]
        assert sqlite_bytes_holding(memory, needles) == {}, (r, busy)
    async with serving(memory) as (proc, client):
        await check_gone(memory, proc.url, client, list(range(len(rounds))))
        sigkill(proc)
    async with serving(memory) as (proc, client):  # and after a later restart
        await check_gone(memory, proc.url, client, list(range(len(rounds))))
        await stop_cleanly(proc)
