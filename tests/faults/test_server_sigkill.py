"""The server process killed with SIGKILL under sustained writes from 8 clients on 8 agents.

Each round starts ``session-server serve`` (``synchronous=FULL``) on the same memory dir;
8 clients, one per agent, persist 4-message turns back to back (idempotency key per
turn); once the clients together have a random number of acknowledgements, the test sends
SIGKILL. A client whose turn was in flight keeps the turn and its key and retries it first
in the next round (at most once: the key makes a committed turn a no-op). After every
round, with the server dead, a fresh registry opens every agent (activation repairs the
mirror) and the test checks: turns 1..T of each agent whole, in order, seqs 1..4T; every
acknowledged turn present; at most the one unacknowledged turn beyond them; the JSONL
mirror equal to a fresh rendering of the events.
"""

from __future__ import annotations

import asyncio
import os
import random
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from session_server.client import ConnectionLostError, SessionClient
from session_server.values.events import SessionEvent
from tests.support.mirror_check import activate_and_close, expected_mirror, mirror_files
from tests.support.server import ServerProcess, turn_messages

AGENTS = [f"kill-agent-{i}" for i in range(8)]
SESSION = "kill-session"
ROUNDS = 20
ROUND_DEADLINE_S = 30.0  # a guard against a hung server, never used to synchronise
ACTIONS = ["user_message", "tool_call_request", "tool_result", "agent_message"]


@dataclass
class Writer:
    agent_id: str
    acked: int = 0  # highest acknowledged turn
    pending: tuple[int, str] | None = None  # (turn, key) in flight when the server died
    keys: dict[int, str] = field(default_factory=dict)

    def next_turn(self) -> tuple[int, str]:
        if self.pending is not None:
            return self.pending
        turn = self.acked + 1
        key = self.keys.setdefault(turn, f"{self.agent_id}/turn-{turn}/{os.urandom(4).hex()}")
        return turn, key


async def write_until_killed(url: str, writer: Writer, acks: asyncio.Queue[str]) -> None:
    """Persist turns until the connection is lost; record acks and the turn in flight."""
    try:
        # No reconnection: the test restarts the server and resends the turn in flight.
        async with SessionClient(url, writer.agent_id, reconnect_budget=0) as client:
            if writer.acked == 0 and writer.pending is None:
                await client.create_session(session_id=SESSION, if_exists="return")
            while True:
                turn, key = writer.next_turn()
                writer.pending = (turn, key)
                result = await client.persist_turn(
                    SESSION, turn_messages(turn), idempotency_key=key
                )
                assert result.seqs == list(range(4 * turn - 3, 4 * turn + 1)), (turn, result)
                writer.pending = None
                writer.acked = turn
                acks.put_nowait(writer.agent_id)
    except (ConnectionLostError, OSError):
        return  # the kill; OSError: the connection was refused or reset before the handshake


def check_log(agent_id: str, events: list[SessionEvent]) -> int:
    """Whole turns 1..T in order with seqs 1..4T; returns T."""
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), f"{agent_id}: seqs"
    assert len(events) % 4 == 0, f"{agent_id}: partial turn, {len(events)} events"
    for index in range(0, len(events), 4):
        turn = index // 4 + 1
        group = events[index : index + 4]
        assert [e.action for e in group] == ACTIONS, f"{agent_id} turn {turn}: {group}"
        expected = turn_messages(turn)
        assert group[0].content == expected[0].content, f"{agent_id} turn {turn}"
        assert group[1].tool_calls is not None and group[1].tool_calls[0].id == f"call-{turn}"
        assert group[2].tool_call_id == f"call-{turn}" and group[2].content == expected[2].content
        assert group[3].content == expected[3].content
    return len(events) // 4


async def one_round(memory_dir: Path, writers: list[Writer], rng: random.Random) -> None:
    server = ServerProcess(memory_dir)
    url = await asyncio.to_thread(server.start)
    try:
        acks: asyncio.Queue[str] = asyncio.Queue()
        tasks = [asyncio.create_task(write_until_killed(url, w, acks)) for w in writers]
        wanted = rng.randint(len(writers), 6 * len(writers))
        async with asyncio.timeout(ROUND_DEADLINE_S):
            for _ in range(wanted):
                await acks.get()
            # Up to ~1 more turn of writes spreads the kill over every phase of a turn.
            for _ in range(rng.randint(0, len(writers))):
                await acks.get()
            server.kill()  # SIGKILL
            await asyncio.gather(*tasks)
    finally:
        server.kill()
        for task in tasks:
            task.cancel()


def test_sigkill_under_load_loses_no_acknowledged_turn(tmp_path: Path, soak: int) -> None:
    seed = int(os.environ.get("FAULT_SEED", random.SystemRandom().randrange(2**32)))
    rng = random.Random(seed)
    memory_dir = tmp_path / "memory"
    writers = [Writer(a) for a in AGENTS]
    for round_no in range(1, ROUNDS * soak + 1):
        where = f"seed={seed} round={round_no}"
        asyncio.run(one_round(memory_dir, writers, rng))
        stored = asyncio.run(activate_and_close(memory_dir, AGENTS))
        for writer in writers:
            events = stored[writer.agent_id].get(SESSION, [])
            turns = check_log(writer.agent_id, events)
            assert turns >= writer.acked, f"{where}: {writer.agent_id} lost turn {writer.acked}"
            limit = writer.acked + (1 if writer.pending is not None else 0)
            assert turns <= limit, f"{where}: {writer.agent_id} has {turns} turns > {limit}"
            # Repaired on activation: the mirror equals a fresh export of the events.
            assert mirror_files(memory_dir, writer.agent_id, SESSION) == expected_mirror(events), (
                f"{where}: {writer.agent_id} mirror differs"
            )
    assert sum(w.acked for w in writers) >= ROUNDS * len(writers)
    # The turns left in flight by the last kill, retried with their keys: stored once.
    asyncio.run(retry_pending(memory_dir, writers))
    stored = asyncio.run(activate_and_close(memory_dir, AGENTS))
    for writer in writers:
        assert check_log(writer.agent_id, stored[writer.agent_id][SESSION]) == writer.acked
        conn = sqlite3.connect(memory_dir / "agents" / writer.agent_id / "agent.sqlite")
        try:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        finally:
            conn.close()


async def retry_pending(memory_dir: Path, writers: list[Writer]) -> None:
    server = ServerProcess(memory_dir)
    url = await asyncio.to_thread(server.start)
    try:
        for writer in writers:
            if writer.pending is None:
                continue
            turn, key = writer.pending
            async with SessionClient(url, writer.agent_id) as client:
                for _ in range(2):  # the second call is a replay: same result, no write
                    result = await client.persist_turn(
                        SESSION, turn_messages(turn), idempotency_key=key
                    )
                    assert result.seqs == list(range(4 * turn - 3, 4 * turn + 1))
            writer.pending, writer.acked = None, turn
        assert server.terminate() == 0
    finally:
        server.kill()
