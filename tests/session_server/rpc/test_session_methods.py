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


async def test_list_filters_any_key_and_pages_uncounted(tmp_path: Path) -> None:
    """Filter keys with apostrophes and spaces (the JSON path is a SQL literal), strings
    that look like JSON text against arrays and objects, and ``count: false`` pages."""
    async with (
        running_server(tmp_path / "memory") as server,
        SessionClient(server.url, AGENT) as client,
    ):
        await client.create_session({"it's": "a", "k k": "b", "arr": [1], "n": 1}, "s1")
        await client.create_session({"it's": "a", "k k": "c", "arr": "[1]", "n": True}, "s2")
        await client.create_session({"obj": {"a": 1}, "n": "1"}, "s3")

        async def ids(metadata: dict[str, object]) -> list[str]:
            return sorted(s["id"] for s in await client.list_sessions(metadata=metadata))

        assert await ids({"it's": "a"}) == ["s1", "s2"]
        assert await ids({"it's": "a", "k k": "c"}) == ["s2"]
        assert await ids({"arr": "[1]"}) == ["s2"]  # the string, not the array
        assert await ids({"obj": '{"a":1}'}) == []
        assert await ids({"n": 1}) == ["s1"]  # not true, not "1"
        assert await ids({"n": "1"}) == ["s3"]
        assert await ids({"n": True}) == ["s2"]
        for i in range(7):
            await client.create_session({"kind": "many"}, f"m{i}")
        first = await client.session_page(metadata={"kind": "many"}, limit=3, count=False)
        assert first.total is None and len(first.sessions) == 3
        assert first.next_offset == 3 and first.next_cursor is not None
        seen = [s["id"] for s in first.sessions]
        page = first
        while page.next_cursor is not None:
            page = await client.session_page(
                metadata={"kind": "many"}, limit=3, cursor=page.next_cursor, count=False
            )
            assert page.total is None
            seen += [s["id"] for s in page.sessions]
        assert sorted(seen) == [f"m{i}" for i in range(7)] and len(seen) == 7
        counted = await client.session_page(metadata={"kind": "many"}, limit=3)
        assert counted.total == 7
        last = await client.session_page(metadata={"kind": "many"}, limit=3, offset=6, count=False)
        assert last.next_offset is None and len(last.sessions) == 1
        assert sorted([s["id"] async for s in client.iter_sessions(page_size=2)]) == sorted(
            ["s1", "s2", "s3", *(f"m{i}" for i in range(7))]
        )
