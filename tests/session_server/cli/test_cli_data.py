"""Export, import, backup and restore as a user runs them, beside a real running server.

The server is a real subprocess holding the agent (its ``agent.lock``); the commands are
real ``session-server`` subprocesses over the same memory dir or, with ``--url``, through
the server. A rich session (tool calls, reasoning, free-form metadata, system messages,
compactions of both kinds, session metadata and strategy) makes the round trip.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from session_server import adapters
from session_server.client import SessionClient
from tests.support.paths import FIXTURES
from tests.support.server import ROOT, ServerProcess

AGENT = "agent-1"
FIXTURE_AGENT = FIXTURES / "agents" / "db manager_db manager_1393"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "session_server", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=str(ROOT),
    )


async def acli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "session_server",
        *args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        cwd=str(ROOT),
    )
    out, err = await proc.communicate()
    return proc.returncode or 0, out.decode(), err.decode()


def turn(n: int, *, reasoning: bool = True) -> list[dict[str, Any]]:
    call = {"id": f"call-{n}", "name": "lookup", "arguments": {"n": n}}
    return [
        {"role": "user", "content": f"question {n}", "metadata": {"trace_id": f"t{n}"}},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [call],
            **({"reasoning": f"I should look {n} up"} if reasoning else {}),
        },
        {"role": "tool", "content": f"result {n} " * 20, "tool_call_id": f"call-{n}"},
        {"role": "assistant", "content": f"answer {n}", "metadata": {"model_cost": n}},
    ]


async def rich_session(client: SessionClient) -> str:
    """Every kind of record SQLite holds about a session."""
    sid = await client.create_session({"title": "rich", "owner": "ana"}, "rich")
    for n in range(1, 4):
        await client.call("turn.persist", {"session_id": sid, "messages": turn(n)})
    system = {"action": "system_instruction", "content": "From now on, answer in French."}
    await client.call("events.append", {"session_id": sid, "events": [system]})
    await client.call(
        "memory.compact", {"session_id": sid, "strategy": {"mode": "compact", "compact_keep": 1}}
    )
    for n in range(4, 7):
        await client.call("turn.persist", {"session_id": sid, "messages": turn(n)})
    await client.call(
        "memory.compact",
        {"session_id": sid, "strategy": {"mode": "summarize", "raw_tail_turns": 1}},
    )
    await client.call("turn.persist", {"session_id": sid, "messages": turn(7, reasoning=False)})
    await client.call(
        "memory.set_strategy",
        {"session_id": sid, "strategy": {"mode": "compact", "compact_keep": 2}},
    )
    return sid


async def observe(url: str, sid: str) -> dict[str, Any]:
    async with SessionClient(url, AGENT) as client:
        built = await client.call("context.build", {"session_id": sid})
        return {
            "session": await client.call("session.get", {"session_id": sid}),
            "events": (await client.call("events.load", {"session_id": sid, "limit": 1000}))[
                "events"
            ],
            "strategy": await client.call("memory.get_strategy", {"session_id": sid}),
            "context": built,
            "rendered": {
                name: await client.call("context.render", {"session_id": sid, "adapter": name})
                for name in adapters.names()
            },
        }


def files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


async def test_lossless_round_trip_beside_a_running_server(tmp_path: Path) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    with ServerProcess(here) as server:
        async with SessionClient(server.url, AGENT) as client:
            sid = await rich_session(client)
        # The server holds the agent: read-only tools still work (no agent.lock needed).
        code, shown, err = await acli("inspect", AGENT, "--memory-dir", str(here))
        assert code == 0, err
        assert "agent: agent-1" in shown
        code, out, err = await acli(
            "export", AGENT, "--session", sid, "--out", str(tmp_path / "out1"),
            "--memory-dir", str(here),
        )  # fmt: skip
        assert code == 0, err
        first = tmp_path / "out1" / "agents" / AGENT
        events = (await observe(server.url, sid))["events"]
        actions = {e["action"] for e in events}
        assert {"system_instruction", "compaction", "tool_call_request"} <= actions
        strategies = {e["compaction"]["strategy"] for e in events if e["action"] == "compaction"}
        assert strategies == {"compact", "summarize"}
        # Writing beside the server is refused with a clear message.
        code, _, err = await acli("import", str(first), "--agent", AGENT, "--memory-dir", str(here))
        assert code == 1 and "agent.lock" in err
        original = await observe(server.url, sid)
    code, out, err = await acli("import", str(first), "--agent", AGENT, "--memory-dir", str(there))
    assert code == 0, err
    assert f"into session {sid} " in out and "losslessly" in out
    code, _, err = await acli(
        "export", AGENT, "--session", sid, "--out", str(tmp_path / "out2"),
        "--memory-dir", str(there),
    )  # fmt: skip
    assert code == 0, err
    assert files(tmp_path / "out2" / "agents" / AGENT) == files(first)
    with ServerProcess(there) as moved:
        assert await observe(moved.url, sid) == original


async def test_export_and_import_through_the_server(tmp_path: Path) -> None:
    with ServerProcess(tmp_path / "mem") as server:
        async with SessionClient(server.url, AGENT) as client:
            sid = await rich_session(client)
        out = tmp_path / "out"
        code, _, err = await acli(
            "export", AGENT, "--session", sid, "--out", str(out), "--url", server.url
        )
        assert code == 0, err
        folder = out / "agents" / AGENT
        assert (folder / "session_rows.jsonl").is_file()
        code, _, err = await acli("import", str(folder), "--agent", AGENT, "--url", server.url)
        assert code == 1 and "already exists" in err  # the originals are there
        code, stdout, err = await acli(
            "import", str(folder), "--agent", AGENT, "--new-ids", "--url", server.url
        )
        assert code == 0, err
        copy = stdout.split("into session ")[1].split()[0]
        a, b = await observe(server.url, sid), await observe(server.url, copy)
        assert [e["seq"] for e in a["events"]] == [e["seq"] for e in b["events"]]
        assert [e["content"] for e in a["events"]] == [e["content"] for e in b["events"]]
        assert a["rendered"] == b["rendered"]
        code, shown, err = await acli("inspect", AGENT, "--session", sid, "--url", server.url)
        assert code == 0 and "agent: agent-1" in shown, err


def count(db: Path, sql: str) -> int:
    conn = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return int(conn.execute(sql).fetchone()[0])
    finally:
        conn.close()


async def test_backup_while_writing_then_restore(tmp_path: Path) -> None:
    here, bk = tmp_path / "here", tmp_path / "bk"
    with ServerProcess(here) as server:
        async with SessionClient(server.url, AGENT) as client:
            sid = await rich_session(client)
            stop = asyncio.Event()

            async def keep_writing() -> int:
                n = 100
                while not stop.is_set():
                    n += 1
                    await client.call("turn.persist", {"session_id": sid, "messages": turn(n)})
                return n - 100

            writer = asyncio.ensure_future(keep_writing())
            code, _, err = await acli("backup", AGENT, "--out", str(bk), "--memory-dir", str(here))
            stop.set()
            written = await writer
        assert code == 0, err
        assert written >= 1
        manifest = json.loads((bk / "manifest.json").read_text())
        entry = manifest["agents"][AGENT]
        copy = bk / entry["file"]
        assert not (bk / f"{entry['file']}-wal").exists()  # one self-contained file
        assert count(copy, "SELECT count(*) FROM events") == entry["events"]
        # a consistent snapshot: every session's last_seq is its highest stored seq
        assert count(copy, "SELECT count(*) FROM sessions s WHERE last_seq !="
                     " (SELECT max(seq) FROM events e WHERE e.session_id = s.id)") == 0  # fmt: skip
        # The server holds the agent: a restore beside it is refused, even with --force.
        code, _, err = await acli("restore", str(bk), "--force", "--memory-dir", str(here))
        assert code == 1 and "--url" in err
        # Through the server it works, and the server then serves the restored agent.
        code, _, err = await acli("restore", str(bk), "--url", server.url)
        assert code == 1 and "force" in err
        code, _, err = await acli("restore", str(bk), "--force", "--url", server.url)
        assert code == 0, err
        async with SessionClient(server.url, AGENT) as client:
            loaded = await client.call("events.load", {"session_id": sid, "limit": 100_000})
            assert len(loaded["events"]) == entry["events"]
            await client.call("turn.persist", {"session_id": sid, "messages": turn(999)})
            view = await client.call("memory.view", {"session_id": sid})
            assert "question 999" in json.dumps(view)
    # Another machine: restore into an empty memory dir, then refuse to overwrite it.
    there = tmp_path / "there"
    code, _, err = await acli("restore", str(bk), "--memory-dir", str(there))
    assert code == 0, err
    assert (
        count(there / "agents" / AGENT / "agent.sqlite", "SELECT count(*) FROM events")
        == (entry["events"])
    )
    code, _, err = await acli("restore", str(bk), "--memory-dir", str(there))
    assert code == 1 and "--force" in err
    with ServerProcess(there) as moved:
        async with SessionClient(moved.url, AGENT) as client:
            assert (await client.call("session.get", {"session_id": sid}))["metadata"] == {
                "title": "rich",
                "owner": "ana",
            }
            view = await client.call("memory.view", {"session_id": sid})
            assert view["raw_traces"]  # the mirror was rebuilt from the restored file


async def test_backup_through_the_server(tmp_path: Path) -> None:
    with ServerProcess(tmp_path / "mem") as server:
        async with SessionClient(server.url, AGENT) as client:
            await rich_session(client)
        code, _, err = await acli(
            "backup", AGENT, "--out", str(tmp_path / "bk"), "--url", server.url
        )
        assert code == 0, err
    code, _, err = await acli("restore", str(tmp_path / "bk"), "--memory-dir", str(tmp_path / "m2"))
    assert code == 0, err


def big_agent(memory_dir: Path, rows: int = 150_000) -> None:
    """An agent file of some tens of MB: a fixture imported, then filler rows written
    directly (the backup copies pages, whatever they hold)."""
    folder = memory_dir / "agents" / AGENT
    done = cli("import", str(FIXTURE_AGENT), "--agent", AGENT,
               "--memory-dir", str(memory_dir))  # fmt: skip
    assert done.returncode == 0, done.stderr
    conn = sqlite3.connect(folder / "agent.sqlite", isolation_level=None)
    conn.execute("BEGIN")
    conn.execute(
        "INSERT INTO sessions (id, agent_id, created_at, updated_at, last_seq)"
        " VALUES ('filler', ?, 0, 0, ?)",
        (AGENT, rows),
    )
    conn.executemany(
        "INSERT INTO events (id, session_id, seq, action, content, created_at)"
        " VALUES (?, 'filler', ?, 'user_message', ?, 0)",
        ((f"f{i}", i, os.urandom(100).hex()) for i in range(1, rows + 1)),
    )
    conn.execute("COMMIT")
    conn.close()


def test_sigkill_during_backup_leaves_nothing_restore_accepts(tmp_path: Path) -> None:
    mem, bk = tmp_path / "mem", tmp_path / "bk"
    big_agent(mem)
    good = cli("backup", AGENT, "--out", str(bk), "--memory-dir", str(mem))
    assert good.returncode == 0, good.stderr
    before = (bk / "manifest.json").read_bytes()
    killed_mid_write = False
    for _attempt in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-m", "session_server", "backup", AGENT, "--out", str(bk),
             "--memory-dir", str(mem)],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            cwd=str(ROOT),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        # Kill it while its temporary copy exists (watching the folder, not the clock).
        while proc.poll() is None:
            if any(p.name.startswith(f".{AGENT}.sqlite.tmp-") for p in bk.iterdir()):
                proc.send_signal(signal.SIGKILL)
                killed_mid_write = True
                break
        proc.wait()
        if killed_mid_write:
            break
    assert killed_mid_write, "the backup finished before its temporary file was seen"
    assert (bk / "manifest.json").read_bytes() == before  # the manifest names the old copy
    # The half-written temporary file is never restored; the previous backup still is.
    restored = cli("restore", str(bk), "--memory-dir", str(tmp_path / "m2"))
    assert restored.returncode == 0, restored.stderr
    # A copy whose bytes are not the ones the manifest names is refused.
    entry = json.loads(before)["agents"][AGENT]
    with (bk / entry["file"]).open("r+b") as f:
        f.seek(entry["bytes"] // 2)
        f.write(b"\x00" * 16)
    refused = cli("restore", str(bk), "--memory-dir", str(tmp_path / "m3"))
    assert refused.returncode == 1 and "SHA-256" in refused.stderr
    assert not (tmp_path / "m3" / "agents" / AGENT / "agent.sqlite").exists()
    # Only a temporary file in an empty folder: not a backup at all.
    lone = tmp_path / "lone"
    lone.mkdir()
    (lone / f".{AGENT}.sqlite.tmp-1").write_bytes(b"partial")
    nothing = cli("restore", str(lone), "--memory-dir", str(tmp_path / "m4"))
    assert nothing.returncode == 1 and "not a backup folder" in nothing.stderr


@pytest.mark.parametrize(
    "how", ["session.delete", "events.delete", "session.clear", "events.pop", "events.pop-replace"]
)
async def test_deleted_text_is_gone_from_every_file(tmp_path: Path, how: str) -> None:
    mem = tmp_path / "mem"
    secret = "SECRET-7f3a9c-" * 3
    with ServerProcess(mem) as server:
        async with SessionClient(server.url, AGENT) as client:
            sid = await client.create_session({"title": "x"}, "doomed")
            keep = await client.create_session(None, "kept")
            messages = [
                {"role": "user", "content": f"my password is {secret}"},
                {"role": "assistant", "content": f"noted: {secret}"},
            ]
            await client.call("turn.persist", {"session_id": sid, "messages": messages})
            await client.call("turn.persist", {"session_id": keep, "messages": turn(1)})
            await client.call("memory.view", {"session_id": sid})  # the mirror has it now
            files_with = [
                p for p in mem.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()
            ]
            assert any(p.name.startswith("agent.sqlite") for p in files_with)
            if how == "session.delete":
                await client.call("session.delete", {"session_id": sid})
            elif how == "events.delete":
                loaded = await client.call("events.load", {"session_id": sid})
                ids = [e["id"] for e in loaded["events"]]
                await client.call("events.delete", {"session_id": sid, "event_ids": ids})
            elif how == "session.clear":
                await client.call("session.clear", {"session_id": sid})
            else:
                # The answer popped, then the user message popped too, or rewritten in place
                # (its text overwritten in its page): the last write's own WAL erase is what
                # the files are checked for.
                popped = await client.call("events.pop", {"session_id": sid})
                assert secret in popped["event"]["content"]
                last: dict[str, Any] = {"session_id": sid}
                if how == "events.pop-replace":
                    last["replace_with"] = {"action": "user_message", "content": "redacted"}
                popped = await client.call("events.pop", last)
                assert secret in popped["event"]["content"]
                assert popped["replaced"] is (how == "events.pop-replace")
            await client.call("memory.view", {"session_id": keep})  # mirror work drained
            leaks = [
                str(p.relative_to(mem))
                for p in mem.rglob("*")
                if p.is_file() and secret.encode()[:14] in p.read_bytes()
            ]
            assert leaks == []
