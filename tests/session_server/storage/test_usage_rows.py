"""Usage in the rows a turn writes (``storage.usage_rows``): the migration of a version-8
file (one row per turn, totals per session and model, per agent day) and the answers of
``memory.usage`` over it, and a delete that takes a session's closed days with it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from session_server import ActorRegistry
from session_server.storage.file_check import check_agent_file
from session_server.values.context import WorkingContext
from session_server.values.events import ContextMessage
from tests.support.old_schema import undo_to

AGENT = "usage-migration"
DAY_MS = 86_400_000
DAY = 20_000  # days since 1970-01-01
# (session, seq, turn, day, model, input, output, cached) as version 8 stored turns
TURNS = [
    ("a", 2, 1, DAY, "gpt", 1000, 100, 600),
    ("a", 4, 2, DAY + 1, None, 30, 5, 20),
    ("a", 6, 3, DAY + 1, "gpt", 200, 20, 0),
    ("b", 2, 1, DAY, "gpt", 50, 5, 0),
]


def db(root: Path) -> Path:
    return root / "agents" / AGENT / "agent.sqlite"


def turn(n: int) -> WorkingContext:
    ctx = WorkingContext()
    ctx.add_message(ContextMessage(role="user", content=f"question {n}"))
    ctx.add_message(ContextMessage(role="assistant", content=f"answer {n}"))
    return ctx


async def file_of_version_8(root: Path) -> None:
    """Sessions a (3 turns over two days, one without a model) and b (1 turn), their
    usage in version 8's tables."""
    async with ActorRegistry(root, idle_timeout=None) as reg:
        actor = await reg.get(AGENT)
        for sid, turns in (("a", 3), ("b", 1)):
            await actor.create_session(session_id=sid)
            for n in range(turns):
                await actor.persist_working_context(sid, turn(n))
    with sqlite3.connect(db(root)) as conn:
        for statement in undo_to(8):
            conn.execute(statement)
        for sid, seq, number, day, model, i, o, c in TURNS:
            at = day * DAY_MS + 3_600_000
            conn.execute(
                "INSERT INTO turn_usage VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, 0)",
                (sid, seq, number, at, model, i, o, c),
            )
            for table, key in (("usage_totals", sid), ("usage_days", day)):
                conn.execute(
                    f"INSERT INTO {table} VALUES (?, ?, ?, ?, ?, 0, 0, 1) ON CONFLICT DO UPDATE"
                    " SET input_tokens = input_tokens + excluded.input_tokens,"
                    " output_tokens = output_tokens + excluded.output_tokens,"
                    " cached_input_tokens = cached_input_tokens + excluded.cached_input_tokens,"
                    " turns = turns + 1",
                    (key, model or "", i, o, c),
                )
        conn.execute("PRAGMA user_version=8")


async def test_a_version_8_file_keeps_its_usage(tmp_path: Path) -> None:
    await file_of_version_8(tmp_path)
    staged = tmp_path / "staged.sqlite"
    staged.write_bytes(db(tmp_path).read_bytes())
    assert check_agent_file(staged) == 2  # a restore of such a file is accepted
    async with ActorRegistry(tmp_path, idle_timeout=None) as reg:
        actor = await reg.get(AGENT)
        whole = (await actor.memory_usage())["totals"]
        assert (whole["input_tokens"], whole["output_tokens"], whole["turns"]) == (1280, 130, 4)
        assert whole["cached_input_tokens"] == 620
        by_model = {
            g["key"]: g["turns"] for g in (await actor.memory_usage(group_by="model"))["groups"]
        }
        assert by_model == {None: 1, "gpt": 3}
        days = (await actor.memory_usage(group_by="day"))["groups"]
        assert [(g["key"], g["turns"], g["input_tokens"]) for g in days] == [
            ("2024-10-04", 2, 1050),
            ("2024-10-05", 2, 230),
        ]
        by_session = await actor.memory_usage(group_by="session", since=(DAY + 1) * DAY_MS)
        assert [(g["key"], g["turns"]) for g in by_session["groups"]] == [("a", 2)]
        chart = await actor.usage_chart("a")
        assert [(t["seq"], t["model"], t["input_tokens"]) for t in chart["turns"]] == [
            (2, "gpt", 1000),
            (4, None, 30),
            (6, "gpt", 200),
        ]
        # the next turn of a, on a later day, closes its open day
        await actor.persist_working_context(
            "a", turn(9), usage={"input_tokens": 7, "output_tokens": 1}, model="gpt"
        )
        after = (await actor.memory_usage(group_by="day"))["groups"]
        assert [(g["turns"], g["input_tokens"]) for g in after[:2]] == [(2, 1050), (2, 230)]
        assert sum(g["turns"] for g in after) == 5
        # deleting a takes its closed days with it
        assert await actor.delete_session("a")
        left = (await actor.memory_usage(group_by="day"))["groups"]
        assert [(g["key"], g["turns"], g["input_tokens"]) for g in left] == [("2024-10-04", 1, 50)]
    with sqlite3.connect(db(tmp_path)) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        assert "turn_usage" not in names and "usage_totals" not in names
        assert conn.execute("SELECT COUNT(*) FROM session_days").fetchone()[0] == 0
