"""Crash safety of branches: a real server subprocess killed with SIGKILL while it forks or
rewinds a session of 20,000 events leaves each operation wholly done or not at all.

Each round starts ``session-server serve`` on the memory dir, activates the agent with a
read, sends the fork (or rewind) and kills the process after a random pause spread over
the operation's duration (measured in-process first; the pause only spreads the kill,
nothing waits on it). Then a fresh in-process registry reopens the files (activation
repairs the mirror) and checks the sessions: the operation's result is all there, or
none of it is, and every mirror equals a rendering of its session's events.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sqlite3
import time
from pathlib import Path

from websockets.sync.client import connect

from session_server import ActorRegistry
from session_server.values.events import SessionEvent
from tests.support.mirror_check import expected_mirror, mirror_files
from tests.support.server import ServerProcess

AGENT = "crash-branches"
SOURCE = "source"
EVENTS = 8_000
ROUNDS = 3
TO_SEQ = 4_000  # a turn boundary: every user message opens a one-event turn


def db(memory_dir: Path) -> Path:
    return memory_dir / "agents" / AGENT / "agent.sqlite"


async def seed(memory_dir: Path) -> float:
    """The source session; the seconds one fork of it takes in-process."""
    async with ActorRegistry(memory_dir, idle_timeout=None) as reg:
        actor = await reg.get(AGENT)
        await actor.create_session(session_id=SOURCE)
        for start in range(0, EVENTS, 4000):
            batch = [
                SessionEvent(action="user_message", content=f"message {n} " + "x" * 40)
                for n in range(start, start + 4000)
            ]
            await actor.append_events(SOURCE, batch)
        started = time.perf_counter()
        fork = await actor.fork_session(SOURCE, new_session_id="calibration")
        took = time.perf_counter() - started
        await actor.delete_session(fork.session_id)
        return took


async def check(memory_dir: Path) -> dict[str, list[SessionEvent]]:
    """Every session's events after a reopen (activation repairs the mirror), each
    session's mirror equal to a rendering of its events."""
    out: dict[str, list[SessionEvent]] = {}
    async with ActorRegistry(memory_dir, idle_timeout=None) as reg:
        actor = await reg.get(AGENT)
        for row in await actor.list_sessions():
            events = await actor.load_events(row["id"], limit=None, tail=False)
            assert row["last_seq"] >= (events[-1].seq if events else 0)
            out[row["id"]] = events
    for sid, events in out.items():
        assert mirror_files(memory_dir, AGENT, sid) == expected_mirror(events), sid
    return out


def killed_during(memory_dir: Path, method: str, params: dict[str, object], pause: float) -> None:
    server = ServerProcess(memory_dir)
    server.start()
    try:
        with connect(f"{server.url}/v1/agents/{AGENT}") as ws:
            ws.send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "session.get",
                                "params": {"session_id": SOURCE}}))  # fmt: skip
            assert "result" in json.loads(ws.recv(timeout=30))  # the agent is active
            ws.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": method, "params": params}))
            time.sleep(pause)  # spreads the kill over the operation; synchronises nothing
            server.kill()
    finally:
        server.kill()


def rewinds_of(memory_dir: Path, session_id: str) -> list[tuple[int, ...]]:
    conn = sqlite3.connect(db(memory_dir))
    try:
        rows = conn.execute(
            "SELECT seq, to_seq, branch_session_id IS NOT NULL FROM rewinds WHERE session_id = ?",
            (session_id,),
        ).fetchall()
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        return [tuple(r) for r in rows]
    finally:
        conn.close()


def test_sigkill_during_fork_and_rewind_leaves_all_or_nothing(tmp_path: Path) -> None:
    seed_value = int(os.environ.get("CRASH_SEED", random.SystemRandom().randrange(2**32)))
    rng = random.Random(seed_value)
    memory_dir = tmp_path / "memory"
    took = asyncio.run(seed(memory_dir))
    source = [(e.seq, e.content) for e in asyncio.run(check(memory_dir))[SOURCE]]
    outcomes = {"fork": [0, 0], "rewind": [0, 0]}
    for round_no in range(ROUNDS):
        where = f"seed={seed_value} round={round_no}"
        # Fork: the new session has all of the source's events, or does not exist.
        fork_id = f"fork-{round_no}"
        pause = rng.uniform(0.0, 1.5 * took)
        killed_during(memory_dir, "session.fork", {"session_id": SOURCE,
                      "new_session_id": fork_id}, pause)  # fmt: skip
        sessions = asyncio.run(check(memory_dir))
        assert [(e.seq, e.content) for e in sessions[SOURCE]] == source, where
        if fork_id in sessions:
            assert [(e.seq, e.content) for e in sessions[fork_id]] == source, where
        else:
            conn = sqlite3.connect(db(memory_dir))
            try:
                (left,) = conn.execute(
                    "SELECT count(*) FROM events WHERE session_id = ?", (fork_id,)
                ).fetchone()
            finally:
                conn.close()
            assert left == 0, where
        outcomes["fork"][fork_id in sessions] += 1
        asyncio.run(delete_all_but_source(memory_dir))
        # Rewind a fork made beforehand: it is at its old head (no rewind row, no
        # branch), or rewound with its abandoned tail in a branch.
        target = f"target-{round_no}"
        asyncio.run(fork_in_process(memory_dir, target))
        pause = rng.uniform(0.0, 1.5 * took)
        killed_during(memory_dir, "session.rewind", {"session_id": target, "to_seq": TO_SEQ},
                      pause)  # fmt: skip
        sessions = asyncio.run(check(memory_dir))
        rows = rewinds_of(memory_dir, target)
        branches = [s for s in sessions if s.startswith("branch-of-")]
        done = bool(rows)
        if done:
            assert rows == [(EVENTS + 1, TO_SEQ, 1)], where
            assert [(e.seq, e.content) for e in sessions[target]] == source[:TO_SEQ], where
        else:
            assert [(e.seq, e.content) for e in sessions[target]] == source, where
        assert not branches
        tails = [
            sid for sid, events in sessions.items()
            if sid not in (SOURCE, target) and not sid.startswith(("fork-", "target-"))
        ]  # fmt: skip
        assert len(tails) == int(done), where
        for sid in tails:
            assert [(e.seq, e.content) for e in sessions[sid]] == source, where
        outcomes["rewind"][done] += 1
        asyncio.run(delete_all_but_source(memory_dir))
    print(f"seed={seed_value} outcomes (not done, done): {outcomes}")


async def fork_in_process(memory_dir: Path, new_id: str) -> None:
    async with ActorRegistry(memory_dir, idle_timeout=None) as reg:
        await (await reg.get(AGENT)).fork_session(SOURCE, new_session_id=new_id)


async def delete_all_but_source(memory_dir: Path) -> None:
    async with ActorRegistry(memory_dir, idle_timeout=None) as reg:
        actor = await reg.get(AGENT)
        for row in await actor.list_sessions():
            if row["id"] != SOURCE:
                assert await actor.delete_session(row["id"])
