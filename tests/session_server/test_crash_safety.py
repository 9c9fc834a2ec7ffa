"""Crash safety: a writer killed with SIGKILL loses no acknowledged turn and leaves no torn one.

A subprocess (``tests/support/crash_writer.py``) appends 4-message turns through the
actor with ``synchronous=FULL`` and prints ``ACK <turn> <first_seq> <last_seq>`` after each
commit. The test kills it at a random moment (after reading a random number of ACK lines
from its stdout, plus a random fraction of a turn), restarts it on the same memory dir for several rounds, and after every
round reopens the store with a fresh registry and checks the whole session log.
"""

from __future__ import annotations

import asyncio
import os
import random
import select
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from session_server.runtime.registry import ActorRegistry
from session_server.values.events import SessionEvent
from tests.support.crash_writer import TOOL_NAME, turn_messages
from tests.support.mirror_check import expected_mirror, mirror_files

ROOT = Path(__file__).resolve().parents[2]
WRITER = ROOT / "tests" / "support" / "crash_writer.py"
AGENT = "crash-agent"
SESSION = "crash-session"
ROUNDS = 8
ROUND_DEADLINE_S = 20.0  # only a guard against a hung writer; never used to synchronise
EXPECTED_ACTIONS = ["user_message", "tool_call_request", "tool_result", "agent_message"]


class Writer:
    """The writer subprocess, with line-oriented reads of its stdout under a deadline."""

    def __init__(
        self, memory_dir: Path, stderr_path: Path, command: list[str] | None = None
    ) -> None:
        self._stderr_path = stderr_path
        self._stderr = stderr_path.open("ab")
        self.proc = subprocess.Popen(
            command or [sys.executable, str(WRITER), str(memory_dir), AGENT, SESSION],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=os.environ.copy(),
            cwd=ROOT,
        )
        assert self.proc.stdout is not None
        self._fd = self.proc.stdout.fileno()
        self._buf = b""
        self._eof = False

    def stderr_text(self) -> str:
        self._stderr.flush()
        return self._stderr_path.read_text(errors="replace")[-4000:]

    def readline(self, deadline: float) -> str | None:
        """The next complete line (without newline), or None at end of file."""
        while b"\n" not in self._buf:
            if self._eof:
                return None
            left = deadline - time.monotonic()
            assert left > 0, f"writer produced no line in time; stderr:\n{self.stderr_text()}"
            ready, _, _ = select.select([self._fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._fd, 65536)
            if not chunk:
                self._eof = True  # a trailing fragment without newline was never an ACK
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def close(self) -> None:
        self.kill()
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        self._stderr.close()


def parse_ack(line: str) -> tuple[int, int, int]:
    word, turn, first, last = line.split()
    assert word == "ACK", line
    return int(turn), int(first), int(last)


async def load_all(memory_dir: Path) -> list[SessionEvent]:
    async with ActorRegistry(memory_dir, synchronous="FULL", idle_timeout=None) as reg:
        actor = await reg.get(AGENT)
        assert await actor.get_session(SESSION) is not None
        return await actor.load_events(SESSION, limit=None, tail=False)


def check_log(events: list[SessionEvent]) -> int:
    """Assert the log is whole turns 1..T in order with seqs 1..N; return T."""
    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "seqs not contiguous"
    assert len(events) % 4 == 0, f"partial turn: {len(events)} events stored"
    for index in range(0, len(events), 4):
        turn = index // 4 + 1
        group = events[index : index + 4]
        assert [e.action for e in group] == EXPECTED_ACTIONS, f"turn {turn}: {group}"
        user, call, result, answer = group
        expected = turn_messages(turn)
        assert user.content == expected[0].content
        assert call.tool_calls is not None and len(call.tool_calls) == 1
        assert call.tool_calls[0].id == f"call-{turn}"
        assert call.tool_calls[0].name == TOOL_NAME
        assert call.tool_calls[0].arguments == {"turn": turn}
        assert result.tool_call_id == f"call-{turn}"
        assert result.tool_name == TOOL_NAME
        assert result.content == expected[2].content
        assert answer.content == expected[3].content
        assert {e.turn for e in group} == {turn}, f"turn {turn}: stored turn numbers differ"
    return len(events) // 4


def test_sigkill_loses_no_acknowledged_turn_and_tears_none(tmp_path: Path) -> None:
    seed = int(os.environ.get("CRASH_SEED", random.SystemRandom().randrange(2**32)))
    rng = random.Random(seed)
    memory_dir = tmp_path / "memory"
    stderr_path = tmp_path / "writer.stderr"
    stored_turns = 0
    all_acked: list[int] = []
    for round_no in range(1, ROUNDS + 1):
        where = f"seed={seed} round={round_no}"
        wanted = rng.randint(1, 20)
        deadline = time.monotonic() + ROUND_DEADLINE_S
        writer = Writer(memory_dir, stderr_path)
        acks: list[tuple[int, int, int]] = []
        try:
            ready = writer.readline(deadline)
            assert ready is not None, f"{where}: writer died: {writer.stderr_text()}"
            # The restarted writer found exactly the turns the previous check saw.
            assert ready == f"READY {stored_turns}", f"{where}: {ready!r}"
            started = time.monotonic()
            while len(acks) < wanted:
                line = writer.readline(deadline)
                assert line is not None, f"{where}: writer died: {writer.stderr_text()}"
                acks.append(parse_ack(line))
            # Right after an ACK the writer is always at the start of its next turn; a
            # random pause of up to ~1.5 turns (measured) spreads the kill over every
            # phase of a turn, commits included. Not a synchronisation: nothing waits on it.
            turn_s = (time.monotonic() - started) / len(acks)
            time.sleep(rng.uniform(0.0, 1.5 * turn_s))
            writer.kill()
            # Lines already in the pipe were acknowledged before the kill: they count too.
            while (line := writer.readline(deadline)) is not None:
                acks.append(parse_ack(line))
        finally:
            writer.close()

        turns = [t for t, _, _ in acks]
        assert turns == list(range(stored_turns + 1, stored_turns + 1 + len(turns))), where
        for turn, first, last in acks:
            assert (first, last) == (4 * turn - 3, 4 * turn), f"{where}: ack of turn {turn}"
        all_acked.extend(turns)

        events = asyncio.run(load_all(memory_dir))
        stored_turns = check_log(events)
        # The mirror was repaired on activation (inside load_all): it equals a fresh export.
        assert mirror_files(memory_dir, AGENT, SESSION) == expected_mirror(events), (
            f"{where}: mirror differs"
        )
        assert not list((memory_dir / "agents" / AGENT / "sessions" / SESSION).glob(".*.tmp"))
        # Every acknowledged turn is there; at most the one turn in flight at the kill
        # (committed, not yet acknowledged) is there beyond them.
        assert stored_turns >= turns[-1], f"{where}: acknowledged turn {turns[-1]} lost"
        assert stored_turns <= turns[-1] + 1, f"{where}: {stored_turns} turns stored"

    # Acknowledged turns only ever grow (a turn in flight at a kill may be unacknowledged).
    assert all_acked == sorted(set(all_acked)) and len(all_acked) >= ROUNDS
    assert all_acked[-1] <= stored_turns <= all_acked[-1] + 1
    db = memory_dir / "agents" / AGENT / "agent.sqlite"
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        (count,) = conn.execute(
            "SELECT count(*) FROM events WHERE session_id = ?", (SESSION,)
        ).fetchone()
    finally:
        conn.close()
    assert count == 4 * stored_turns
