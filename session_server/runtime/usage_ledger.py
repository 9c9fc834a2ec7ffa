"""``UsageLedger``: one agent's usage totals and budgets (I/O shell around ``values.usage``).

The usage itself is stored by the turn's own transaction (``storage.usage_rows``); the
ledger answers ``memory.usage``, stores budgets (a session's in its row, the agent's in
``agent_settings``) and says whether a session is past a budget. Budgets are cached per
session once read, and whether a session is past one is computed again only after a turn
with usage, a budget change or a delete, so a build of a session without a budget costs
a dict lookup.

Cost is computed when asked, from the stored tokens and the prices the server runs with:
new prices apply to past turns too (the tokens are the record; the prices are the
operator's current view of them).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, TypeVar

import msgspec

from ..process.usage_metrics import UsageMetrics
from ..storage.store import AgentStore
from ..storage.usage_rows import (
    GroupBy,
    budget_of,
    read_chart,
    read_session_column,
    read_totals,
)
from ..values.errors import BudgetExceededError, InvalidParamsError, NotFoundError
from ..values.usage import (
    Budget,
    ModelPrice,
    UsageTotals,
    budget_exceeded,
    budget_json,
    cost_of,
    parse_budget,
    total_cost,
    totals_json,
)

__all__ = ["AGENT_BUDGET_KEY", "UsageLedger", "UsageSettings"]

T = TypeVar("T")

AGENT_BUDGET_KEY: Final = "usage_budget"
MAX_CACHED_SESSIONS: Final = 10_000
MAX_CHART_TURNS: Final = 2_000


@dataclass(frozen=True)
class UsageSettings:
    """Server-wide usage options: the operator's prices (``--prices``), the regular
    expression that makes the metrics label of an agent id (``--usage-label``; ``None``:
    one label, ``all``), and the metrics (made by the registry on its prometheus
    registry when ``None``)."""

    prices: dict[str, ModelPrice] = field(default_factory=dict)
    metrics_label: str | None = None
    metrics: UsageMetrics | None = None


class LedgerHost(Protocol):
    """What the ledger needs of its actor."""

    async def run_read(self, fn: Callable[[AgentStore], Awaitable[T]]) -> T: ...

    async def run_write(self, fn: Callable[[AgentStore], Awaitable[T]]) -> T: ...


_UNKNOWN: Final = object()


class UsageLedger:
    """One agent's usage answers and budget checks (module docstring)."""

    def __init__(self, agent_id: str, settings: UsageSettings) -> None:
        self.agent_id = agent_id
        self.settings = settings
        self._agent_budget: Any = _UNKNOWN  # Budget | None once read
        self._budgets: dict[str, Budget | None] = {}
        self._over: dict[str, str | None] = {}  # session -> reason it is past a budget

    # -- caches --------------------------------------------------------------------------

    def forget(self, session_id: str | None = None) -> None:
        """Drop what is cached about a session (a delete), or everything (``None``)."""
        if session_id is None:
            self._agent_budget = _UNKNOWN
            self._budgets.clear()
        else:
            self._budgets.pop(session_id, None)
        self._over.clear()  # the agent's totals moved too

    # -- memory.usage --------------------------------------------------------------------

    async def usage(
        self,
        host: LedgerHost,
        *,
        session_id: str | None = None,
        since: int | None = None,
        until: int | None = None,
        group_by: GroupBy = None,
    ) -> dict[str, Any]:
        """``{totals, groups?}``: token counts, turns and cost (when every model in it is
        priced) for the agent or one session, in ``[since, until)`` (ms)."""
        if since is not None and until is not None and until < since:
            raise InvalidParamsError("until: must not be before since", data={"field": "until"})

        prices = self.settings.prices

        def fn(conn: sqlite3.Connection) -> dict[str, Any] | None:
            # On the read thread: the rows are as many as the sessions (group_by
            # "session"), so the answer is built here, not on the event loop.
            if session_id is not None and (
                conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
                is None
            ):
                return None
            rows = read_totals(
                conn, session_id=session_id, since=since, until=until, group_by=group_by
            )
            return usage_answer(rows, prices, grouped=group_by is not None)

        answer = await host.run_read(lambda s: s.query(fn))
        if answer is None:
            raise NotFoundError.session(session_id or "")
        return answer

    async def chart(self, host: LedgerHost, session_id: str, limit: int) -> dict[str, Any]:
        """The newest ``limit`` turns of a session with their usage and cost, the seqs of
        its compactions, its totals and budget: what the inspector draws."""
        limit = max(1, min(limit, MAX_CHART_TURNS))

        def fn(conn: sqlite3.Connection) -> dict[str, Any] | None:
            if (
                conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
                is None
            ):
                return None
            return read_chart(conn, session_id, limit)

        out = await host.run_read(lambda s: s.query(fn))
        if out is None:
            raise NotFoundError.session(session_id)
        for turn in out["turns"]:
            usage = UsageTotals(
                turn["input_tokens"],
                turn["output_tokens"],
                turn["cached_input_tokens"],
                turn["cache_write_tokens"],
                turn["reasoning_tokens"],
                model=turn["model"],
            )
            cost = cost_of(usage, self.settings.prices)
            if cost is not None:
                turn["cost"] = cost
        out.update(await self.usage(host, session_id=session_id))
        out["budget"] = budget_json(await self.session_budget(host, session_id))
        out["agent_budget"] = budget_json(await self.agent_budget(host))
        return out

    # -- budgets -------------------------------------------------------------------------

    async def agent_budget(self, host: LedgerHost) -> Budget | None:
        if self._agent_budget is _UNKNOWN:
            text = await host.run_read(lambda s: s.get_setting(AGENT_BUDGET_KEY))
            self._agent_budget = budget_of(text)
        budget: Budget | None = self._agent_budget
        return budget

    async def session_budget(self, host: LedgerHost, session_id: str) -> Budget | None:
        if session_id in self._budgets:
            return self._budgets[session_id]

        exists, text = await host.run_read(
            lambda s: s.query(lambda c: read_session_column(c, session_id, "budget"))
        )
        budget = budget_of(text)
        if exists:
            if len(self._budgets) >= MAX_CACHED_SESSIONS:
                self._budgets.clear()
            self._budgets[session_id] = budget
        return budget

    async def set_agent_budget(self, host: LedgerHost, budget: object) -> dict[str, Any]:
        """Store the agent's budget (``None`` clears it); it applies at once."""
        parsed = parse_budget(budget)

        async def write(store: AgentStore) -> None:
            if parsed is None:
                await store.delete_setting(AGENT_BUDGET_KEY)
            else:
                await store.set_setting(AGENT_BUDGET_KEY, msgspec.json.encode(parsed).decode())
            self._agent_budget = parsed
            self._over.clear()

        await host.run_write(write)
        return {"budget": budget_json(parsed)}

    async def set_session_budget(
        self, host: LedgerHost, session_id: str, budget: object
    ) -> Budget | None:
        """Store a session's budget (``None`` clears it); it applies at once."""
        parsed = parse_budget(budget)
        text = None if parsed is None else msgspec.json.encode(parsed).decode()

        def body(conn: sqlite3.Connection) -> None:
            cur = conn.execute("UPDATE sessions SET budget = ? WHERE id = ?", (text, session_id))
            if cur.rowcount == 0:
                raise NotFoundError.session(session_id)

        async def write(store: AgentStore) -> None:
            await store.transact("set budget", body)
            self._budgets[session_id] = parsed
            self._over.pop(session_id, None)

        await host.run_write(write)
        return parsed

    async def over_budget(self, host: LedgerHost, session_id: str) -> str | None:
        """Why the session is past a budget (``"session: max_total_tokens"``, ...), or
        ``None``. Reads only when a budget applies and the answer is not cached."""
        if session_id in self._over:
            return self._over[session_id]
        agent = await self.agent_budget(host)
        own = await self.session_budget(host, session_id)
        reason = None
        if own is not None:
            rows = await self._by_model(host, session_id)
            limit = budget_exceeded(own, rows, self.settings.prices)
            if limit is not None:
                reason = f"session: {limit}"
        if reason is None and agent is not None:
            rows = await self._by_model(host, None)
            limit = budget_exceeded(agent, rows, self.settings.prices)
            if limit is not None:
                reason = f"agent: {limit}"
        if len(self._over) >= MAX_CACHED_SESSIONS:
            self._over.clear()
        self._over[session_id] = reason
        return reason

    async def _by_model(self, host: LedgerHost, session_id: str | None) -> list[UsageTotals]:
        rows = await host.run_read(
            lambda s: s.query(lambda c: read_totals(c, session_id=session_id, group_by="model"))
        )
        return [t for _, t in rows]

    def committed(self, usage: UsageTotals) -> None:
        """A turn with ``usage`` was committed (called by the group commit, once per
        commit: an idempotent replay commits nothing and is not counted): the metrics."""
        metrics = self.settings.metrics
        if metrics is not None:
            metrics.turn(self.agent_id, usage, cost_of(usage, self.settings.prices))

    async def after_turn(self, host: LedgerHost, session_id: str, usage: UsageTotals) -> bool:
        """After a turn with ``usage`` was answered: whether the session is now past a
        budget (the answer's ``budget_exceeded``)."""
        if self._agent_budget is None and self._budgets.get(session_id, _UNKNOWN) is None:
            self._over.pop(session_id, None)
            return False  # no budget applies: nothing to read
        self._over.clear()  # every session's agent-level answer moved
        return await self.over_budget(host, session_id) is not None

    async def check_build(self, host: LedgerHost, session_id: str, override: bool) -> None:
        """Refuse a build of a session past a budget (``BudgetExceededError``, -32005)
        unless ``override``."""
        if override:
            return
        reason = await self.over_budget(host, session_id)
        if reason is not None:
            scope, _, limit = reason.partition(": ")
            raise BudgetExceededError(
                f"session_id: session {session_id!r} is past the {scope}'s budget ({limit}); "
                "raise the budget, or pass override_budget: true to build anyway",
                data={
                    "reason": "budget_exceeded",
                    "retryable": False,
                    "scope": scope,
                    "limit": limit,
                    "session_id": session_id,
                    "field": "override_budget",
                },
            )


def usage_answer(
    rows: list[tuple[str | None, UsageTotals]], prices: dict[str, ModelPrice], *, grouped: bool
) -> dict[str, Any]:
    """``{totals, groups?}`` from per-(key, model) rows, in their order."""
    answer: dict[str, Any] = {"totals": _summed([t for _, t in rows], prices)}
    if grouped:
        groups: dict[str | None, list[UsageTotals]] = {}
        for key, totals in rows:
            groups.setdefault(key, []).append(totals)
        answer["groups"] = [{"key": key, **_summed(parts, prices)} for key, parts in groups.items()]
    return answer


def _summed(parts: list[UsageTotals], prices: dict[str, ModelPrice]) -> dict[str, Any]:
    """One answer total of per-model parts (cost only when every part is priced)."""
    a = b = c = d = e = turns = 0
    for r in parts:
        a += r.input_tokens
        b += r.output_tokens
        c += r.cached_input_tokens
        d += r.cache_write_tokens
        e += r.reasoning_tokens
        turns += r.turns
    return totals_json(UsageTotals(a, b, c, d, e, turns), total_cost(parts, prices))
