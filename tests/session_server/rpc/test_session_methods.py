"""``session.update {merge: true}`` over a real server: only the given metadata keys are
set, in the writer's transaction, so concurrent merges from several connections keep
every key; refusals name the field."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from session_server.client import SessionClient
from session_server.client.sync_client import SyncSessionClient
from session_server.values.errors import InvalidParamsError, NotFoundError
from session_server.values.metadata_merge import MAX_SESSION_METADATA_BYTES
from tests.support.server import running_server

AGENT = "merging agent"


async def test_concurrent_merges_keep_every_key(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path / "memory") as server,
        SessionClient(server.url, AGENT) as one,
        SessionClient(server.url, AGENT) as two,
    ):
        await one.create_session({"kind": "holder", "keep": {"x": 1}}, session_id="h")
        writes = [
            client.update_session("h", {f"{name}{i}": i}, merge=True)
            for i in range(25)
            for name, client in (("one", one), ("two", two))
        ]
        await asyncio.gather(*writes)
        row = await one.get_session("h")
        assert row is not None
        assert row["metadata"] == {
            "kind": "holder",
            "keep": {"x": 1},
            **{f"{name}{i}": i for i in range(25) for name in ("one", "two")},
        }
        merged = await two.update_session("h", {"keep": None, "kind": "k"}, merge=True)
        assert merged["metadata"]["keep"] is None and merged["metadata"]["kind"] == "k"
        assert merged["metadata"]["one0"] == 0
        replaced = await two.update_session("h", {"only": True})
        assert replaced["metadata"] == {"only": True}


async def test_merge_refusals(tmp_path: Path) -> None:
    async with running_server(tmp_path / "memory") as server:
        async with SessionClient(server.url, AGENT) as client:
            await client.create_session({"blob": "x" * (MAX_SESSION_METADATA_BYTES - 64)}, "s")
            with pytest.raises(InvalidParamsError) as info:
                await client.update_session("s", {"more": "y" * 100}, merge=True)
            assert info.value.data is not None and info.value.data["field"] == "metadata"
            assert (await client.get_session("s") or {})["metadata"].keys() == {"blob"}
            with pytest.raises(InvalidParamsError) as info:
                await client.update_session("s", None, merge=True)
            assert info.value.data is not None and info.value.data["field"] == "metadata"
            with pytest.raises(InvalidParamsError):
                await client.call(
                    "session.update", {"session_id": "s", "metadata": {}, "merge": "yes"}
                )
            with pytest.raises(NotFoundError):
                await client.update_session("missing", {"k": 1}, merge=True)

        def sync_merge() -> dict[str, object]:
            with SyncSessionClient(server.url, AGENT) as sync:
                sync.create_session({"a": 1}, "t")
                return dict(sync.update_session("t", {"b": 2}, merge=True)["metadata"])

        assert await asyncio.to_thread(sync_merge) == {"a": 1, "b": 2}
