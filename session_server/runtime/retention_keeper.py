"""``RetentionKeeper``: one agent's retention policies and their sweeps (I/O shell around
``values.retention``).

Policies are stored in the session's row (``retention``) and, for the agent, in
``agent_settings``. A sweep reads every session's times and asks ``plan_retention`` what
goes, both on the read thread (one query, plus two per session only where a
``max_raw_events`` policy applies), and erases it one step at a time through the actor's
own ``delete_sessions`` and ``delete_events``: the same transactions, secure delete, WAL
truncation, search-index purge, mirror removal, cache eviction and ``session.deleted``
notification as a client's delete. A step deletes a batch of sessions in one transaction,
sized from the last step's (``values.retention.next_batch``) so that its delete
statements take about ``STEP_TARGET_MS`` (the search index's purge and the WAL's
truncation are paid once per step whatever its size); each step is one write in the actor's mailbox, so
other clients' writes queue between steps and no step holds the event loop. A process
killed during a sweep leaves each batch erased whole or not at all, and the next sweep
finishes the job.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, Final, Protocol, TypeVar

import msgspec

from ..process.usage_metrics import UsageMetrics
from ..storage.lineage_sql import events_source
from ..storage.store import AgentStore
from ..storage.usage_rows import (
    budget_of,
    read_session_ages,
    read_session_column,
    read_usage_columns,
)
from ..values.errors import NotFoundError
from ..values.retention import (
    RawCut,
    RetentionPlan,
    RetentionPolicy,
    effective_policy,
    expires_at,
    next_batch,
    parse_policy,
    plan_retention,
    policy_for,
    policy_json,
)
from ..values.usage import budget_json
from .session_erasure import ErasureHost, erase_batch

__all__ = ["AGENT_RETENTION_KEY", "ERASE_PAGE", "FIRST_BATCH", "RetentionKeeper"]

T = TypeVar("T")

AGENT_RETENTION_KEY: Final = "retention_policy"
ERASE_PAGE: Final = 500
"""Raw events erased per transaction (one mailbox step)."""
FIRST_BATCH: Final = 8
"""Sessions deleted by a sweep's first step (later steps are sized by ``next_batch``)."""


class RetentionHost(ErasureHost, Protocol):
    """What the keeper needs of its actor (a sweep's batches go through
    ``session_erasure.erase_batch``, the path of ``session.delete``)."""

    async def run_read(self, fn: Callable[[AgentStore], Awaitable[T]]) -> T: ...

    async def run_write(self, fn: Callable[[AgentStore], Awaitable[T]]) -> T: ...

    async def delete_events(self, session_id: str, event_ids: Sequence[str]) -> int: ...

    async def mirror_settled(self) -> None: ...


_UNKNOWN: Final = object()


def _erasable(conn: sqlite3.Connection, cut: RawCut) -> list[str]:
    """Ids of the next page of raw events ``cut`` erases (oldest first), read through the
    session's lineage (a fork's inherited events are its own to forget: the delete keeps
    the rows other sessions still read, ``lineage_sql.delete_from_view``)."""
    src, pre = events_source(conn, cut.session_id)
    sid = cut.session_id
    return [
        str(r[0])
        for r in conn.execute(
            f"SELECT id, seq FROM {src} WHERE session_id = ? AND seq < ?"
            " AND action != 'compaction' AND seq < COALESCE(("
            f"SELECT seq FROM {src} WHERE session_id = ?"
            " AND action != 'compaction' ORDER BY seq DESC"
            " LIMIT 1 OFFSET ? - 1), 0) ORDER BY seq LIMIT ?",
            (*pre, sid, cut.before_seq, *pre, sid, cut.keep, ERASE_PAGE),
        )
    ]


async def _next_page(host: RetentionHost, cut: RawCut) -> list[str]:
    page = partial(_erasable, cut=cut)
    return await host.run_read(lambda s: s.query(page))


def _decode(text: str | None) -> RetentionPolicy | None:
    return None if text is None else msgspec.json.decode(text, type=RetentionPolicy)


class RetentionKeeper:
    """Retention of one agent (module docstring)."""

    def __init__(self, agent_id: str, metrics: UsageMetrics | None = None) -> None:
        self.agent_id = agent_id
        self.metrics = metrics
        self._agent: Any = _UNKNOWN  # RetentionPolicy | None once read
        self._batch = FIRST_BATCH  # sessions the next sweep step deletes

    def forget(self) -> None:
        """Drop the cached agent policy (the store was closed or replaced)."""
        self._agent = _UNKNOWN

    async def agent_policy(self, host: RetentionHost) -> RetentionPolicy | None:
        if self._agent is _UNKNOWN:
            self._agent = _decode(await host.run_read(lambda s: s.get_setting(AGENT_RETENTION_KEY)))
        policy: RetentionPolicy | None = self._agent
        return policy

    async def _session_row(
        self, host: RetentionHost, session_id: str
    ) -> tuple[int, int, str | None]:
        def fn(conn: sqlite3.Connection) -> tuple[int, int, str | None] | None:
            exists, policy = read_session_column(conn, session_id, "retention")
            row = conn.execute(
                "SELECT created_at, updated_at FROM sessions WHERE id = ?", (session_id,)
            ).fetchone()
            return None if row is None or not exists else (int(row[0]), int(row[1]), policy)

        row = await host.run_read(lambda s: s.query(fn))
        if row is None:
            raise NotFoundError.session(session_id)
        return row

    async def expires(self, host: RetentionHost, session_id: str) -> int | None:
        """When the session expires (ms) under its effective policy, or ``None``."""
        created, updated, own = await self._session_row(host, session_id)
        policy = effective_policy(await self.agent_policy(host), _decode(own))
        return expires_at(policy, created, updated)

    async def get(self, host: RetentionHost, session_id: str | None = None) -> dict[str, Any]:
        """``{policy}`` for the agent; ``{policy, effective, expires_at}`` for a session."""
        agent = await self.agent_policy(host)
        if session_id is None:
            return {"policy": policy_json(agent)}
        created, updated, own_text = await self._session_row(host, session_id)
        own = _decode(own_text)
        effective = effective_policy(agent, own)
        return {
            "session_id": session_id,
            "policy": policy_json(own),
            "effective": policy_json(effective),
            "expires_at": expires_at(effective, created, updated),
        }

    async def annotate(self, host: RetentionHost, rows: list[dict[str, Any]]) -> None:
        """Add ``budget`` and ``expires_at`` to session rows (``session.list``'s page), as
        ``session.get`` shows them: one read of the page's two columns."""
        ids = [str(r["id"]) for r in rows]
        if not ids:
            return
        columns = await host.run_read(lambda s: s.query(lambda c: read_usage_columns(c, ids)))
        agent = await self.agent_policy(host)
        for row in rows:
            budget, own = columns.get(str(row["id"]), (None, None))
            row["budget"] = budget_json(budget_of(budget))
            policy = effective_policy(agent, _decode(own))
            row["expires_at"] = expires_at(policy, int(row["created_at"]), int(row["updated_at"]))

    async def set(
        self, host: RetentionHost, policy: object, session_id: str | None = None
    ) -> dict[str, Any]:
        """Store a policy (``None`` or ``{}`` clears it); the answer is ``get``'s."""
        parsed = None if policy is None else parse_policy(policy, session=session_id is not None)
        if parsed is not None and parsed.empty:
            parsed = None
        text = None if parsed is None else msgspec.json.encode(parsed).decode()

        def body(conn: sqlite3.Connection) -> None:
            cur = conn.execute("UPDATE sessions SET retention = ? WHERE id = ?", (text, session_id))
            if cur.rowcount == 0:
                raise NotFoundError.session(session_id or "")

        async def write(store: AgentStore) -> None:
            if session_id is not None:
                await store.transact("set retention", body)
            elif text is None:
                await store.delete_setting(AGENT_RETENTION_KEY)
                self._agent = None
            else:
                await store.set_setting(AGENT_RETENTION_KEY, text)
                self._agent = parsed

        await host.run_write(write)
        return await self.get(host, session_id)

    async def plan(
        self,
        host: RetentionHost,
        *,
        policy: object = None,
        session_id: str | None = None,
        now_ms: int | None = None,
    ) -> RetentionPlan:
        """What the stored policies (or ``policy`` in their place) remove now."""
        override = None
        if policy is not None:
            override = parse_policy(policy, session=session_id is not None)
        agent = await self.agent_policy(host)
        if session_id is not None:
            await self._session_row(host, session_id)  # NotFoundError for an unknown id
        now = int(time.time() * 1000) if now_ms is None else now_ms

        def raw_needed(own: RetentionPolicy | None) -> bool:
            return policy_for(agent, own, override, session_id).max_raw_events is not None

        def fn(conn: sqlite3.Connection) -> RetentionPlan:
            # On the read thread: the rows (and the plan) are as many as the sessions.
            ages = read_session_ages(conn, raw_needed)
            return plan_retention(ages, agent, now, override=override, only=session_id)

        return await host.run_read(lambda s: s.query(fn))

    async def preview(
        self, host: RetentionHost, *, policy: object = None, session_id: str | None = None
    ) -> dict[str, Any]:
        """What a policy would remove, removing nothing."""
        return (await self.plan(host, policy=policy, session_id=session_id)).to_json()

    async def sweep(
        self, host: RetentionHost, *, now_ms: int | None = None, max_steps: int | None = None
    ) -> dict[str, Any]:
        """Apply the stored policies: erase what ``plan`` says, one mailbox step per batch
        of sessions (``session_erasure.erase_batch``: one transaction whose statements
        take about ``STEP_TARGET_MS``) or page of events. ``max_steps`` bounds the
        steps of this call (the rest waits for the next sweep). Answers ``{sessions,
        events, more}``."""
        plan = await self.plan(host, now_ms=now_ms)
        steps = 0
        sessions = 0
        events = 0
        more = False
        queue = list(plan.sessions)
        reasons = dict(queue)
        while queue:
            if max_steps is not None and steps >= max_steps:
                more = True
                break
            steps += 1
            # The mirror's backlog is written first, outside the write lock: a step's
            # folder moves wait in the mirror's queue behind it, and other clients'
            # writes would wait for the step meanwhile.
            await host.mirror_settled()
            batch = [sid for sid, _ in queue[: self._batch]]
            del queue[: len(batch)]
            deleted, seconds = await erase_batch(host, batch)
            self._batch = next_batch(len(batch), seconds * 1000)
            sessions += len(deleted)
            if self.metrics is not None:
                for sid in deleted:
                    self.metrics.sessions_erased.labels(reasons[sid]).inc()
        for cut in plan.raw:
            while not more:
                if max_steps is not None and steps >= max_steps:
                    more = True
                    break
                steps += 1
                ids = await _next_page(host, cut)
                if not ids:
                    break
                erased = await host.delete_events(cut.session_id, ids)
                events += erased
                if self.metrics is not None:
                    self.metrics.events_erased.inc(erased)
                if len(ids) < ERASE_PAGE:
                    break
        if self.metrics is not None:
            self.metrics.sweeps.inc()
        return {"sessions": sessions, "events": events, "more": more}
