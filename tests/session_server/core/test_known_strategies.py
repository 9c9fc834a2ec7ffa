"""The strategies an agent's core remembers for sessions its recent cache does not hold
(``AgentCore.stored_strategy``): a client that persists without building through the
server reads no session row per turn, and what is remembered is never stale."""

from __future__ import annotations

import pytest

from session_server.core.agent_core import AgentCore
from session_server.core.decisions import AppendPlan, StrategyWrite
from session_server.core.needs import Known, NeedAgentStrategy, NeedState, NeedWindow
from session_server.core.strategies import MAX_KNOWN_STRATEGIES
from session_server.values.context import WorkingContext
from session_server.values.errors import NotFoundError
from session_server.values.events import ContextMessage
from session_server.values.plans import SessionState

SID = "s"
COMPACT = {"mode": "compact", "compact_keep": 1, "compact_trigger_turns": 1}


def new_core() -> AgentCore:
    core = AgentCore("agent", context_limit=50, server_strategy=None, snapshots=False)
    core.learn(NeedAgentStrategy(0), None, Known())  # the agent has no strategy of its own
    return core


def plan(core: AgentCore, sid: str = SID, known: Known | None = None) -> object:
    """One turn's plan (or the read it needs first)."""
    ctx = WorkingContext()
    ctx.add_message(ContextMessage(role="user", content="hi"))
    turn = core.prepare_turn(sid, ctx, usage=None, on_conflict="append", idempotency_key=None)
    return core.plan_turn(turn, Known() if known is None else known)


def persist_once(
    core: AgentCore, sid: str = SID, strategy: dict[str, object] | None = None
) -> None:
    """A turn on a session the recent cache does not hold: its row is read once."""
    known = Known()
    step = plan(core, sid, known)
    assert step == NeedState(sid)
    core.learn(step, SessionState(sid, last_seq=0, strategy=strategy), known)
    assert isinstance(plan(core, sid, known), AppendPlan)


def write_strategy(core: AgentCore, sid: str, strategy: dict[str, object] | None) -> None:
    write = core.plan_strategy(strategy, sid)
    assert isinstance(write, StrategyWrite)
    core.strategy_written(write)


def test_the_second_turn_reads_no_session_row() -> None:
    core = new_core()
    persist_once(core)
    for _ in range(3):
        assert isinstance(plan(core), AppendPlan)


def test_a_strategy_written_since_is_what_the_next_turn_uses() -> None:
    core = new_core()
    persist_once(core)
    write_strategy(core, SID, COMPACT)
    # Under a compacting strategy the turn's size is the server's own count: the window.
    assert plan(core) == NeedWindow(SID, 50, 1)  # version 1: the strategy write
    assert core.stored_strategy(SID, Known()) == COMPACT
    write_strategy(core, SID, None)
    assert core.stored_strategy(SID, Known()) is None
    assert isinstance(plan(core), AppendPlan)


def test_a_row_read_before_a_strategy_write_is_not_remembered() -> None:
    core = new_core()
    known = Known()
    step = plan(core, SID, known)
    assert step == NeedState(SID)
    write_strategy(core, SID, COMPACT)  # commits while the read is in flight
    core.learn(step, SessionState(SID, last_seq=0, strategy=None), known)  # the old row
    assert isinstance(plan(core, SID, known), AppendPlan)  # this request uses its read
    assert plan(core) == NeedState(SID)  # but the next one reads again: nothing was kept


@pytest.mark.parametrize("how", ["session deleted", "hibernated"])
def test_a_deleted_session_or_a_closed_store_forgets(how: str) -> None:
    core = new_core()
    persist_once(core)
    if how == "session deleted":
        core.session_deleted(SID)
        known = Known()
        assert plan(core, SID, known) == NeedState(SID)
        core.learn(NeedState(SID), None, known)
        with pytest.raises(NotFoundError):
            plan(core, SID, known)
    else:
        core.hibernated()
        core.learn(NeedAgentStrategy(0), None, Known())
        assert plan(core) == NeedState(SID)


def test_at_most_max_known_strategies_are_kept_least_recently_used_first() -> None:
    core = new_core()
    for i in range(MAX_KNOWN_STRATEGIES):
        persist_once(core, f"s{i}")
    assert isinstance(plan(core, "s0"), AppendPlan)  # s0 is now the most recently used
    persist_once(core, "new")
    assert plan(core, "s1") == NeedState("s1")  # the least recently used went
    assert isinstance(plan(core, "s0"), AppendPlan)
    assert isinstance(plan(core, "new"), AppendPlan)
