"""Crash safety of group commit: SIGKILL while several writers' turns commit together.

A subprocess (``tests/support/group_crash_writer.py``) runs concurrent writers on one
agent, one session each, with ``synchronous=FULL``: the turns that queue up while a
commit is in flight are committed as one group. It prints ``ACK <w> <turn> <first>
<last> <commits>`` after each commit. The test kills it at random moments for several
rounds and, after each, checks every session with a fresh registry: every acknowledged
turn is there with the seqs it was acknowledged with, no turn is torn (whole turns, seqs
contiguous), and at most the turn in flight is there beyond the acknowledged ones.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time
from pathlib import Path

from session_server.runtime.registry import ActorRegistry
from session_server.values.events import SessionEvent
from tests.session_server.test_crash_safety import ROUND_DEADLINE_S, Writer, check_log

AGENT = "group-crash-agent"
WRITERS = 6
ROUNDS = 5


def parse_ack(line: str) -> tuple[int, int, int, int, int]:
    word, *fields = line.split()
    assert word == "ACK", line
    w, turn, first, last, commits = map(int, fields)
    return w, turn, first, last, commits


async def load_sessions(memory_dir: Path) -> dict[int, list[SessionEvent]]:
    async with ActorRegistry(memory_dir, synchronous="FULL", idle_timeout=None) as reg:
        actor = await reg.get(AGENT)
        return {
            w: await actor.load_events(f"g-{w}", limit=None, tail=False) for w in range(WRITERS)
        }


def test_sigkill_during_group_commits_loses_no_acknowledged_turn(tmp_path: Path) -> None:
    seed = int(os.environ.get("CRASH_SEED", random.SystemRandom().randrange(2**32)))
    rng = random.Random(seed)
    memory_dir = tmp_path / "memory"
    command = [
        sys.executable,
        "-m",
        "tests.support.group_crash_writer",
        str(memory_dir),
        AGENT,
        str(WRITERS),
    ]
    stored = dict.fromkeys(range(WRITERS), 0)
    acked_total = commits_total = 0
    for round_no in range(1, ROUNDS + 1):
        where = f"seed={seed} round={round_no}"
        wanted = rng.randint(WRITERS, 10 * WRITERS)
        deadline = time.monotonic() + ROUND_DEADLINE_S
        writer = Writer(memory_dir, tmp_path / "writer.stderr", command)
        acks: list[tuple[int, int, int, int, int]] = []
        try:
            for _ in range(WRITERS):
                ready = writer.readline(deadline)
                assert ready is not None, f"{where}: writer died: {writer.stderr_text()}"
                _, w, last_turn = ready.split()
                # The restarted writer found exactly the turns the previous check saw.
                assert int(last_turn) == stored[int(w)], f"{where}: {ready!r}"
            started = time.monotonic()
            while len(acks) < wanted:
                line = writer.readline(deadline)
                assert line is not None, f"{where}: writer died: {writer.stderr_text()}"
                acks.append(parse_ack(line))
            # A random pause of up to ~2 turns' worth spreads the kill over every phase
            # of a group commit. Not a synchronisation: nothing waits on it.
            per_ack = (time.monotonic() - started) / len(acks)
            time.sleep(rng.uniform(0.0, 2 * WRITERS * per_ack))
            writer.kill()
            # Lines already in the pipe were acknowledged before the kill: they count too.
            while (line := writer.readline(deadline)) is not None:
                acks.append(parse_ack(line))
        finally:
            writer.close()

        sessions = asyncio.run(load_sessions(memory_dir))
        for w in range(WRITERS):
            mine = [(turn, first, last) for ww, turn, first, last, _ in acks if ww == w]
            turns = [t for t, _, _ in mine]
            assert turns == list(range(stored[w] + 1, stored[w] + 1 + len(turns))), where
            for turn, first, last in mine:
                assert (first, last) == (4 * turn - 3, 4 * turn), f"{where}: w{w} turn {turn}"
            count = check_log(sessions[w])  # whole turns 1..T, seqs contiguous, none torn
            top = turns[-1] if turns else stored[w]
            assert top <= count <= top + 1, f"{where}: w{w}: {count} turns, acked {top}"
            stored[w] = count
        acked_total += len(acks)
        commits_total += max(c for *_, c in acks) if acks else 0
    # The turns really were committed in groups: fewer transactions than turns.
    assert commits_total < acked_total, (commits_total, acked_total)
