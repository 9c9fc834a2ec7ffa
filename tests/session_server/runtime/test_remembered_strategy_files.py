"""The strategy an agent's core remembers for a session it does not cache
(``AgentCore.stored_strategy``) follows the file under it: a file replaced (a restore),
a change made while the agent was hibernated, a session deleted and imported again with
another strategy. Real registries on real SQLite files."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

from session_server import ActorRegistry, AgentActor
from session_server.core.needs import Known, Need
from session_server.values.context import WorkingContext
from session_server.values.events import ContextMessage

COMPACT = {"mode": "compact", "max_context_tokens": 20_000}
COMPACT_JSON = json.dumps(COMPACT)
USAGE = {"prompt_tokens": 50_000}  # pressure under COMPACT, none under the default


async def persist(actor: AgentActor, sid: str, n: int) -> bool:
    """A turn without a build through the server; whether it raised the pressure flag."""
    ctx = WorkingContext()
    ctx.add_message(ContextMessage(role="user", content=f"question {n}"))
    result = await actor.persist_working_context(sid, ctx, usage=USAGE)
    return result.compaction_required


def remembered(actor: AgentActor, sid: str) -> bool:
    return not isinstance(actor.core.stored_strategy(sid, Known()), Need)


def set_strategy_in_file(path: Path, sid: str, strategy: str | None) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE sessions SET strategy = ? WHERE id = ?", (strategy, sid))
    conn.close()


async def test_a_replaced_file_and_a_change_while_hibernated_are_seen(tmp_path: Path) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None, mirror=False) as reg:
        actor = await reg.get("agent")
        restored, changed = await actor.create_session(), await actor.create_session()
        for sid in (restored, changed):
            assert await persist(actor, sid, 1) is False
            assert remembered(actor, sid) and actor.core.cached_view(sid, 1) is None
        # A restore swaps the file while the actor is closed for it.
        await actor.replace_file(lambda: set_strategy_in_file(actor.path, restored, COMPACT_JSON))
        assert await persist(actor, restored, 2) is True
        assert await persist(actor, changed, 2) is False
        assert remembered(actor, changed)
        # Hibernated: another writer (a tool on the closed file) changes the strategy.
        # First the build the flagged turn primed in the background ends (a read in
        # flight keeps the store open through a hibernation).
        await asyncio.gather(*actor.compactions._primers)
        await actor.hibernate()
        assert not reg.is_tracked(actor)  # its store is closed
        set_strategy_in_file(actor.path, changed, COMPACT_JSON)
        assert await persist(actor, changed, 3) is True


async def test_a_session_deleted_and_imported_again_takes_its_new_strategy(
    tmp_path: Path,
) -> None:
    async with ActorRegistry(tmp_path, idle_timeout=None, mirror=False) as reg:
        actor = await reg.get("agent")
        sid = await actor.create_session()
        await actor.set_strategy(COMPACT, sid)
        rows = await (await actor.store()).session_rows(sid)
        assert rows is not None
        await actor.set_strategy(None, sid)
        assert await persist(actor, sid, 1) is False
        assert remembered(actor, sid)
        await actor.delete_session(sid)
        await actor.import_rows(rows)  # the same id, stored with COMPACT
        assert await persist(actor, sid, 2) is True
