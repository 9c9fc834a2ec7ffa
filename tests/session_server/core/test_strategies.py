"""``KnownStrategies``: the stored strategy levels an agent's core knows, and their
precedence; a read older than a write or a change is never taken."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from session_server.core.decisions import StrategyWrite
from session_server.core.needs import NeedAgentStrategy
from session_server.core.strategies import MAX_KNOWN_STRATEGIES, KnownStrategies

COMPACT = {"mode": "compact", "compact_keep": 1, "compact_trigger_turns": 1}


def test_the_agent_default_is_read_first_then_known() -> None:
    known = KnownStrategies(None)
    need = known.agent()
    assert need == NeedAgentStrategy(0)
    assert known.resolve(None, None) == need  # the precedence waits for the read too
    known.agent_read(need, '{"mode": "compact"}')
    assert known.agent() == {"mode": "compact"}
    assert known.agent_known == {"mode": "compact"}
    assert known.resolve(None, None).mode == "compact"


def test_a_read_older_than_a_write_is_not_taken() -> None:
    known = KnownStrategies(None)
    need = known.agent()
    assert isinstance(need, NeedAgentStrategy)
    known.written(StrategyWrite(None, {"mode": "summarize"}, '{"mode":"summarize"}'))
    known.agent_read(need, None)  # issued before the write: stale
    assert known.agent() == {"mode": "summarize"}


def test_precedence_request_over_session_over_agent_over_server() -> None:
    known = KnownStrategies({"mode": "compact", "compact_keep": 7})
    known.agent_read(NeedAgentStrategy(0), '{"compact_keep": 5}')
    assert known.resolve(None, None).compact_keep == 5
    assert known.resolve({"compact_keep": 4}, None).compact_keep == 4
    assert known.resolve({"compact_keep": 4}, {"compact_keep": 3}).compact_keep == 3


def test_a_session_read_before_a_change_is_not_remembered() -> None:
    known = KnownStrategies(None)
    epoch = known.epoch
    known.written(StrategyWrite("s", COMPACT, None))  # a change since the read was issued
    known.remember("s", None, epoch)
    assert known.session("s") == (False, None)
    known.remember("s", COMPACT, known.epoch)
    assert known.session("s") == (True, COMPACT)


def test_a_remembered_session_follows_its_writes_and_is_forgotten() -> None:
    known = KnownStrategies(None)
    known.remember("s", None, known.epoch)
    known.written(StrategyWrite("s", COMPACT, None))
    assert known.session("s") == (True, COMPACT)
    known.forget("s")
    assert known.session("s") == (False, None)


def test_hibernation_forgets_every_level_read() -> None:
    known = KnownStrategies(None)
    known.agent_read(NeedAgentStrategy(0), None)
    known.remember("s", COMPACT, known.epoch)
    known.hibernated()
    assert known.agent() == NeedAgentStrategy(0)
    assert known.session("s") == (False, None)


@given(st.lists(st.integers(0, 2 * MAX_KNOWN_STRATEGIES), max_size=3 * MAX_KNOWN_STRATEGIES))
def test_at_most_the_bound_is_remembered_least_recently_used_first(ids: list[int]) -> None:
    known = KnownStrategies(None)
    order: list[str] = []  # least recently used first, as the bound drops them
    for i in ids:
        sid = f"s{i}"
        hit, _ = known.session(sid)
        if not hit:
            known.remember(sid, None, known.epoch)
        if sid in order:
            order.remove(sid)
        order.append(sid)
        order = order[-MAX_KNOWN_STRATEGIES:]
    assert all(known.session(sid)[0] for sid in order)
    gone = {f"s{i}" for i in ids} - set(order)
    assert not any(known.session(sid)[0] for sid in gone)
