"""Property: over random sequences of appends, forks, rewinds, deletes, pops, compactions
and session deletes on a real file, every session's ``events.load`` equals a reference
model that copies lists (a fork is a plain copy of its source's events up to the fork
point); and when every session is gone, no event row is left in SQLite."""

from __future__ import annotations

import asyncio
import sqlite3
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from session_server import ActorRegistry, AgentActor
from session_server.values.events import SessionEvent

Row = tuple[int, str, str, str]  # seq, action, content, id
Op = tuple[str, int, int]


class Model:
    """Sessions as plain lists of events (copied on fork), and their last seqs."""

    def __init__(self) -> None:
        self.events: dict[str, list[Row]] = {}
        self.last: dict[str, int] = {}


async def loaded(actor: AgentActor, sid: str) -> list[Row]:
    return [(e.seq, e.action, e.content, e.id) for e in await actor.load_events(sid, limit=None)]


async def apply(actor: AgentActor, model: Model, op: Op, counter: list[int]) -> None:
    kind, pick, arg = op
    names = list(model.events)  # in order of creation: the same ops pick the same sessions
    if kind == "new" or not names:
        sid = await actor.create_session()
        model.events[sid], model.last[sid] = [], 0
        return
    sid = names[pick % len(names)]
    rows = model.events[sid]
    if kind == "append":
        counter[0] += 1
        n = counter[0]
        events = [
            SessionEvent(action="user_message", content=f"q{n}"),
            SessionEvent(action="agent_message", content=f"a{n}"),
        ][: 1 + arg % 2]
        await actor.append_events(sid, events)
        model.events[sid] = await loaded(actor, sid)  # ids and seqs as stored
        assert [r[1:3] for r in model.events[sid][len(rows) :]] == [
            (e.action, e.content) for e in events
        ]
        assert model.events[sid][: len(rows)] == rows
        model.last[sid] += len(events)
    elif kind == "fork":
        at = arg % (model.last[sid] + 1)
        fork = await actor.fork_session(sid, at_seq=at)
        model.events[fork.session_id] = [r for r in rows if r[0] <= at]
        model.last[fork.session_id] = at
    elif kind in ("rewind", "erase"):
        to = arg % (model.last[sid] + 1)
        result = await actor.rewind_session(sid, to, erase=kind == "erase")
        old_last = model.last[sid]
        model.events[sid] = [r for r in rows if r[0] <= result.to_seq]
        model.last[sid] = result.rewind_seq
        assert result.rewind_seq == old_last + 1
        if result.branch_session_id is not None:
            model.events[result.branch_session_id] = list(rows)
            model.last[result.branch_session_id] = old_last
    elif kind == "delete" and rows:
        gone = rows[arg % len(rows)]
        assert await actor.delete_events(sid, [gone[3]]) == 1
        model.events[sid] = [r for r in rows if r != gone]
    elif kind == "pop":
        popped = await actor.pop_event(sid)
        plain = [r for r in rows if r[1] != "compaction"]
        assert (popped.id if popped else None) == (plain[-1][3] if plain else None)
        model.events[sid] = [r for r in rows if not plain or r != plain[-1]]
    elif kind == "compact":
        await actor.compact(sid, strategy={"mode": "compact", "compact_keep": 1})
        after = await loaded(actor, sid)
        assert after[: len(rows)] == rows  # a compaction only appends its record
        model.events[sid] = after
        row = await actor.get_session(sid)
        assert row is not None
        model.last[sid] = int(row["last_seq"])
    elif kind == "drop":
        assert await actor.delete_session(sid)
        del model.events[sid], model.last[sid]


async def run(ops: list[Op]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with ActorRegistry(Path(tmp), idle_timeout=None) as reg:
            actor = await reg.get("a")
            model, counter = Model(), [0]
            for op in ops:
                await apply(actor, model, op, counter)
                for sid, rows in model.events.items():
                    assert await loaded(actor, sid) == rows, (op, sid)
            for sid in list(model.events):
                assert await actor.delete_session(sid)
            path = Path(tmp) / "agents" / "a" / "agent.sqlite"
            conn = sqlite3.connect(path)
            try:
                assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 0
                assert conn.execute("SELECT count(*) FROM lineage").fetchone()[0] == 0
            finally:
                conn.close()


_OP = st.tuples(
    st.sampled_from(
        ["new", "append", "append", "append", "fork", "fork", "rewind", "erase", "delete",
         "pop", "compact", "drop"]
    ),
    st.integers(0, 50),
    st.integers(0, 50),
)  # fmt: skip


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.lists(_OP, min_size=4, max_size=24))
def test_every_session_reads_what_a_copying_model_holds(ops: list[Op]) -> None:
    asyncio.run(run([("new", 0, 0), ("append", 0, 1), *ops]))
