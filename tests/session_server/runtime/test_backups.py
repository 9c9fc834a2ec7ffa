"""``agent.restore`` accepts only a file this server could have written.

A real server on 127.0.0.1 backs up a real agent; the backup file is then altered with
``sqlite3`` the way a hostile or broken file would be, and restored over the agent.
Each refusal is -32602 naming what is wrong, and the agent keeps its old data and keeps
working: the current file is untouched until a new one has passed every check.
"""

from __future__ import annotations

import base64
import hashlib
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from session_server.client import SessionClient
from session_server.storage.staging import STAGING_DIR
from session_server.values.errors import InvalidParamsError
from tests.support.server import running_server, turn_messages

AGENT = "agent-r"
SID = "s1"


def _dicts(n: int) -> list[dict[str, Any]]:
    return [msgspec.to_builtins(m) for m in turn_messages(n)]


async def _fill(client: SessionClient) -> None:
    await client.create_session({"title": "kept"}, SID)
    for n in range(3):
        await client.call(
            "turn.persist",
            {"session_id": SID, "messages": _dicts(n)},
        )
    await client.call(
        "memory.compact",
        {"session_id": SID, "strategy": {"mode": "summarize", "raw_tail_turns": 1}},
    )


def _altered(tmp: Path, data: str, change: Callable[[sqlite3.Connection], None]) -> tuple[str, str]:
    """The backup ``data`` with ``change`` applied to the file: ``(base64, sha256)``."""
    path = tmp / "altered.sqlite"
    path.unlink(missing_ok=True)
    path.write_bytes(base64.b64decode(data))
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        change(conn)
    finally:
        conn.close()
    raw = path.read_bytes()
    return base64.b64encode(raw).decode("ascii"), hashlib.sha256(raw).hexdigest()


def _script(*statements: str) -> Callable[[sqlite3.Connection], None]:
    def run(conn: sqlite3.Connection) -> None:
        for statement in statements:
            conn.execute(statement)

    return run


BAD: dict[str, tuple[Callable[[sqlite3.Connection], None], str]] = {
    "trigger": (
        _script(
            "CREATE TRIGGER eat AFTER INSERT ON events BEGIN"
            " DELETE FROM events WHERE id = new.id; END"
        ),
        "trigger 'eat'",
    ),
    "view": (
        _script(
            "ALTER TABLE events RENAME TO events_real",
            "CREATE VIEW events AS SELECT * FROM events_real",
        ),
        "view 'events'",
    ),
    "missing table": (_script("DROP TABLE tool_calls"), "table 'tool_calls' is missing"),
    "extra table": (_script("CREATE TABLE notes (x TEXT)"), "table 'notes'"),
    "extra index": (_script("CREATE INDEX by_content ON events(content)"), "index 'by_content'"),
    "lowered last_seq": (
        _script(f"UPDATE sessions SET last_seq = 2 WHERE id = '{SID}'"),
        "outside 1..last_seq (2)",
    ),
    "duplicate seq": (
        _script(
            "DROP INDEX idx_events_session_seq",
            f"UPDATE events SET seq = 1 WHERE session_id = '{SID}' AND seq = 2",
        ),
        "seq 1 is used twice",
    ),
    "compaction beyond end": (
        _script(
            "UPDATE events SET metadata = json_set(metadata, '$.compaction.tail_start_seq',"
            " 100000, '$.compaction.boundary_seq', 100000) WHERE action = 'compaction'"
        ),
        "lies outside the session",
    ),
    "newer user_version": (_script("PRAGMA user_version = 99"), "user_version) 99"),
    "no user_version": (_script("PRAGMA user_version = 0"), "user_version) 0"),
    "check constraint": (
        _script(
            "PRAGMA writable_schema = ON",
            "UPDATE sqlite_master SET sql = replace(sql, 'key TEXT PRIMARY KEY NOT NULL',"
            " 'key TEXT PRIMARY KEY NOT NULL CHECK (length(key) < 3)')"
            " WHERE name = 'agent_settings'",
        ),
        "CHECK",
    ),
    "text seq": (
        _script(f"UPDATE events SET seq = 'x' || seq WHERE session_id = '{SID}' AND seq = 1"),
        "events.seq: holds a value of type text",
    ),
    "bad strategy": (
        _script(f"UPDATE sessions SET strategy = '{{\"mode\": \"shred\"}}' WHERE id = '{SID}'"),
        "its strategy is not one this server accepts",
    ),
    "orphan events": (_script(f"DELETE FROM sessions WHERE id = '{SID}'"), "does not exist"),
}


@pytest.mark.parametrize("kind", sorted(BAD))
async def test_a_bad_file_is_refused_and_the_agent_keeps_its_data(
    tmp_path: Path, kind: str
) -> None:
    change, expected = BAD[kind]
    async with (
        running_server(tmp_path / "mem") as running,
        SessionClient(running.url, AGENT) as client,
    ):
        await _fill(client)
        backup = await client.backup_agent()
        before = await client.call("events.load", {"session_id": SID, "limit": 1000})
        await client.call(
            "turn.persist",
            {"session_id": SID, "messages": _dicts(9)},
        )
        after_backup = await client.call("events.load", {"session_id": SID, "limit": 1000})
        assert len(after_backup["events"]) > len(before["events"])
        data, digest = _altered(tmp_path, backup["data"], change)
        with pytest.raises(InvalidParamsError) as refused:
            await client.restore_agent(data, digest, force=True)
        assert expected in refused.value.message, refused.value.message
        assert refused.value.data is not None and refused.value.data["field"] == "data"
        # The agent still has its data (the events written after the backup too)...
        now = await client.call("events.load", {"session_id": SID, "limit": 1000})
        assert now == after_backup
        # ... and still works.
        done = await client.call(
            "turn.persist",
            {"session_id": SID, "messages": _dicts(10)},
        )
        assert done["seqs"][0] == after_backup["events"][-1]["seq"] + 1
        built = await client.call("context.build", {"session_id": SID})
        assert "question 10" in str(built["messages"])
    # Nothing staged is left behind.
    assert not (tmp_path / "mem" / STAGING_DIR).exists()


async def test_a_good_backup_is_restored(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path / "mem") as running,
        SessionClient(running.url, AGENT) as client,
    ):
        await _fill(client)
        backup = await client.backup_agent()
        expected = await client.call("events.load", {"session_id": SID, "limit": 1000})
        await client.call(
            "turn.persist",
            {"session_id": SID, "messages": _dicts(9)},
        )
        done = await client.restore_agent(backup["data"], backup["sha256"], force=True)
        assert done["sessions"] == 1
        assert await client.call("events.load", {"session_id": SID, "limit": 1000}) == expected


def _older(version: int) -> Callable[[sqlite3.Connection], None]:
    """The file as an older server wrote it (the migrations' steps undone)."""
    statements = [
        "CREATE INDEX idx_events_session_created ON events(session_id, created_at)",
        # what version 4 added (usage, budgets, retention)
        "DROP TABLE turn_usage",
        "DROP TABLE usage_totals",
        "DROP TABLE usage_days",
        "ALTER TABLE sessions DROP COLUMN budget",
        "ALTER TABLE sessions DROP COLUMN retention",
        f"PRAGMA user_version = {version}",
    ]
    if version == 1:  # the sessions table of version 1 (schema.sql at that version)
        v1 = (
            "id, agent_id, created_at, updated_at, metadata, last_seq, last_turn,"
            " last_turn_start_seq, strategy, compaction_required, mirror_seq"
        )
        statements += [
            "CREATE TABLE sessions_v1 (id TEXT PRIMARY KEY NOT NULL, agent_id TEXT NOT NULL,"
            " created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, metadata TEXT,"
            " last_seq INTEGER NOT NULL DEFAULT 0, last_turn INTEGER NOT NULL DEFAULT 0,"
            " last_turn_start_seq INTEGER NOT NULL DEFAULT 0, strategy TEXT,"
            " compaction_required INTEGER NOT NULL DEFAULT 0,"
            " mirror_seq INTEGER NOT NULL DEFAULT 0)",
            f"INSERT INTO sessions_v1 SELECT {v1} FROM sessions",
            "DROP TABLE sessions",
            "ALTER TABLE sessions_v1 RENAME TO sessions",
        ]
    return _script(*statements)


@pytest.mark.parametrize("version", [1, 2])
async def test_a_file_of_an_older_schema_is_migrated(tmp_path: Path, version: int) -> None:
    async with (
        running_server(tmp_path / "mem") as running,
        SessionClient(running.url, AGENT) as client,
    ):
        await _fill(client)
        backup = await client.backup_agent()
        expected = await client.call("events.load", {"session_id": SID, "limit": 1000})
        data, digest = _altered(tmp_path, backup["data"], _older(version))
        await client.restore_agent(data, digest, force=True)
        assert await client.call("events.load", {"session_id": SID, "limit": 1000}) == expected
    db = tmp_path / "mem" / "agents" / AGENT / "agent.sqlite"
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 4
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        assert "idx_events_session_created" not in names
    finally:
        conn.close()


async def test_a_digest_that_does_not_match_is_refused(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path / "mem") as running,
        SessionClient(running.url, AGENT) as client,
    ):
        await _fill(client)
        backup: dict[str, Any] = await client.backup_agent()
        with pytest.raises(InvalidParamsError) as refused:
            await client.restore_agent(backup["data"], "0" * 64, force=True)
        assert refused.value.data == {"field": "sha256"}
        loaded = await client.call("events.load", {"session_id": SID, "limit": 1})
        assert loaded["events"]
