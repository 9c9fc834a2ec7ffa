"""memory.blocks.* over a real server: the client's methods, refusals, token scopes."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import sqlite3
from pathlib import Path

import pytest

from session_server.auth import Scope, mint_token
from session_server.client import SessionClient
from session_server.client.sync_client import SyncSessionClient
from session_server.values.errors import (
    ConflictError,
    ForbiddenError,
    InvalidParamsError,
    NotFoundError,
)
from tests.support.server import running_server

AGENT = "block-agent"
SECRET = "blocks-secret-" + "x" * 32


async def test_blocks_through_the_client(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path / "mem") as running,
        SessionClient(running.url, AGENT) as client,
    ):
        # An agent's first write may be a block (the agent is created).
        made = await client.set_block("persona", "A calm bot.", description="Who you are")
        assert made == {
            "label": "persona",
            "session_id": None,
            "revision": 1,
            "tokens": made["tokens"],
            "max_tokens": 2000,
        }
        sid = await client.create_session(session_id="s1")
        await client.set_block("task", "step 1", session_id=sid, max_tokens=20, reason="start")
        await client.set_block("task", "step 2", session_id=sid, expected_revision=1)
        with pytest.raises(ConflictError) as stale:
            await client.set_block("task", "step 3", session_id=sid, expected_revision=1)
        assert stale.value.data == {"field": "expected_revision", "revision": 2}
        with pytest.raises(InvalidParamsError) as big:
            await client.set_block("task", "many words " * 40, session_id=sid)
        assert big.value.data is not None and big.value.data["field"] == "value"
        got = await client.get_block("task", session_id=sid)
        assert (got["value"], got["revision"], got["author"]) == ("step 2", 2, "client")
        listed = await client.list_blocks(session_id=sid)
        assert [(b["label"], b["session_id"]) for b in listed] == [
            ("persona", None),
            ("task", "s1"),
        ]
        assert [b["label"] for b in await client.list_blocks()] == ["persona"]
        history = await client.block_history("task", session_id=sid, limit=1)
        assert [r["revision"] for r in history["revisions"]] == [2]
        assert history["next_before_revision"] == 2
        older = await client.block_history("task", session_id=sid, before_revision=2)
        assert [(r["revision"], r["reason"]) for r in older["revisions"]] == [(1, "start")]
        assert older["next_before_revision"] is None
        reverted = await client.revert_block("task", 1, session_id=sid)
        assert reverted["revision"] == 3
        built = await client.call("context.build", {"session_id": sid})
        system = "\n".join(built["system_instructions"])
        assert "[task · " in system and "step 1" in system and "A calm bot." in system
        assert await client.delete_block("task", session_id=sid) is True
        with pytest.raises(NotFoundError):
            await client.get_block("task", session_id=sid)
        with pytest.raises(InvalidParamsError):
            await client.call("memory.blocks.set", {"label": "bad label", "value": "x"})


def test_the_sync_client_wraps_the_block_methods(tmp_path: Path) -> None:
    async def serve(ready: asyncio.Future[str], stop: asyncio.Event) -> None:
        async with running_server(tmp_path / "mem") as running:
            ready.set_result(running.url)
            await stop.wait()

    async def main() -> None:
        ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()
        task = asyncio.ensure_future(serve(ready, stop))
        url = await ready
        client = SyncSessionClient(url, AGENT)
        try:
            await asyncio.to_thread(client.set_block, "persona", "v1")
            got = await asyncio.to_thread(client.get_block, "persona")
            assert got["value"] == "v1"
        finally:
            await asyncio.to_thread(client.close)
            stop.set()
            await task

    asyncio.run(main())


async def test_token_scopes_of_blocks(tmp_path: Path) -> None:
    def token(scope: Scope, *, blocks: bool = False, sessions: list[str] | None = None) -> str:
        return mint_token(
            SECRET,
            agents=[AGENT],
            scope=scope,
            ttl=600,
            blocks=blocks,
            sessions=sessions,
        )

    async with running_server(tmp_path / "mem", secrets=[SECRET]) as running:
        async with SessionClient(running.url, AGENT, token=token("admin")) as admin:
            await admin.set_block("persona", "agent block")
            await admin.create_session(session_id="s1")
            await admin.create_session(session_id="s2")
        async with SessionClient(running.url, AGENT, token=token("read")) as reader:
            assert (await reader.get_block("persona"))["value"] == "agent block"
            with pytest.raises(ForbiddenError):
                await reader.set_block("note", "x", session_id="s1")
        async with SessionClient(running.url, AGENT, token=token("write")) as writer:
            await writer.set_block("note", "x", session_id="s1")
            await writer.delete_block("note", session_id="s1")
            for call in (
                writer.set_block("persona", "overwritten"),
                writer.revert_block("persona", 1),
                writer.delete_block("persona"),
            ):
                with pytest.raises(ForbiddenError) as refused:
                    await call
                assert refused.value.data == {"field": "session_id"}
        async with SessionClient(running.url, AGENT, token=token("write", blocks=True)) as claimed:
            await claimed.set_block("persona", "written with the claim")
        async with SessionClient(
            running.url, AGENT, token=token("write", sessions=["s1"])
        ) as limited:
            await limited.set_block("note", "mine", session_id="s1")
            with pytest.raises(ForbiddenError):
                await limited.set_block("note", "theirs", session_id="s2")
            with pytest.raises(ForbiddenError):
                await limited.list_blocks()  # the agent's blocks: not this token's


async def test_export_import_carry_a_sessions_blocks_with_history(tmp_path: Path) -> None:
    async with running_server(tmp_path / "mem") as running:
        async with SessionClient(running.url, AGENT) as client:
            sid = await client.create_session(session_id="s1")
            await client.set_block("task", "one", session_id=sid, reason="first")
            await client.set_block("task", "two", session_id=sid)
            await client.set_block("persona", "the agent's own")
            exported = await client.export_session(sid)
        assert "blocks.jsonl" in exported["files"]
        assert "the agent's own" not in exported["files"]["blocks.jsonl"]
        async with SessionClient(running.url, "other-agent") as other:
            for files, lossless in (
                (exported["files"], True),
                (_lenient(exported["files"]), False),
            ):
                target = "lossless" if lossless else "lenient"
                answer = await other.import_session(files, session_id=target)
                assert answer["lossless"] is lossless
                history = await other.block_history("task", session_id=target)
                assert [(r["revision"], r["value"], r["reason"]) for r in history["revisions"]] == [
                    (2, "two", None),
                    (1, "one", "first"),
                ]
                built = await other.call("context.build", {"session_id": target})
                assert "two" in "\n".join(built["system_instructions"])
            bad = dict(exported["files"], **{"blocks.jsonl": '{"label": "bad label"}\n'})
            with pytest.raises(InvalidParamsError) as refused:
                await other.import_session(bad, session_id="never")
            assert refused.value.data is not None and refused.value.data["field"] == "blocks.jsonl"
            with pytest.raises(NotFoundError):
                await other.call("session.get", {"session_id": "never"})


def _lenient(files: dict[str, str]) -> dict[str, str]:
    """The export without its lossless rows file: imported from the reference files."""
    return {k: v for k, v in files.items() if k != "session_rows.jsonl"}


async def test_backup_and_restore_carry_blocks_and_history(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path / "mem") as running,
        SessionClient(running.url, AGENT) as client,
    ):
        sid = await client.create_session(session_id="s1")
        await client.set_block("persona", "v1")
        await client.set_block("persona", "v2")
        await client.set_block("task", "kept", session_id=sid)
        backup = await client.backup_agent()
        await client.set_block("persona", "after the backup")
        await client.delete_block("task", session_id=sid)
        await client.restore_agent(backup["data"], backup["sha256"], force=True)
        assert (await client.get_block("persona"))["value"] == "v2"
        assert [r["revision"] for r in (await client.block_history("persona"))["revisions"]] == [
            2,
            1,
        ]
        built = await client.call("context.build", {"session_id": sid})
        system = "\n".join(built["system_instructions"])
        assert "kept" in system and "after the backup" not in system


async def test_a_restored_file_with_broken_blocks_is_refused(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path / "mem") as running,
        SessionClient(running.url, AGENT) as client,
    ):
        await client.create_session(session_id="s1")
        await client.set_block("persona", "v1")
        await client.set_block("persona", "v2")
        backup = await client.backup_agent()
        for change, problem in (
            ("UPDATE memory_blocks SET head = 1", "not exactly one current revision"),
            (
                "INSERT INTO memory_blocks (session_id, label, revision, value, max_tokens,"
                " tokens, author, created_at, head) VALUES ('ghost', 'x', 1, '', 5, 0,"
                " 'client', 0, 1)",
                "its session 'ghost' does not exist",
            ),
            ("UPDATE memory_blocks SET author = 'someone'", "could not have written"),
        ):
            path = tmp_path / "altered.sqlite"
            path.write_bytes(base64.b64decode(backup["data"]))
            conn = sqlite3.connect(path, isolation_level=None)
            try:
                conn.execute(change)
            finally:
                conn.close()
            raw = path.read_bytes()
            path.unlink()
            with pytest.raises(InvalidParamsError, match=problem):
                await client.restore_agent(
                    base64.b64encode(raw).decode(), hashlib.sha256(raw).hexdigest(), force=True
                )
        assert (await client.get_block("persona"))["value"] == "v2"  # the agent kept its file
