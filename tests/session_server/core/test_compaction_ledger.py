"""``CompactionLedger``: one compaction turn at a time per session, and the reasons a
summary would gain nothing, each reported once."""

from __future__ import annotations

from session_server.core.compaction_ledger import CompactionLedger


def test_one_compaction_at_a_time_per_session() -> None:
    ledger = CompactionLedger()
    assert ledger.begin("a")
    assert not ledger.begin("a")
    assert ledger.begin("b")  # another session is not held up
    ledger.end("a")
    assert ledger.begin("a")


def test_a_reason_is_reported_once_per_session() -> None:
    ledger = CompactionLedger()
    assert ledger.note("a") is None
    ledger.futile("a", "nothing to summarise")
    ledger.futile("b", "nothing to summarise")
    assert ledger.note("a") == "nothing to summarise"
    assert ledger.note("a") is None
    assert ledger.note("b") == "nothing to summarise"
    ledger.futile("a", "no gain")
    assert ledger.note("a") == "no gain"
    ledger.clear_futile("a")
    ledger.futile("a", "nothing to summarise")  # reported before: not again
    assert ledger.note("a") is None


def test_the_turn_gate_is_kept_until_a_summary_may_gain_again() -> None:
    ledger = CompactionLedger()
    assert ledger.futile_turn("a") is None
    ledger.futile("a", "no gain", 7)
    ledger.futile("a", "nothing to summarise")  # a reason alone keeps the gate
    assert ledger.futile_turn("a") == 7
    ledger.clear_futile("a")
    assert ledger.futile_turn("a") is None
    assert ledger.note("a") is None  # nothing would be futile any more
