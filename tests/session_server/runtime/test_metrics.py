from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from session_server.compaction.records import CompactionPlan
from session_server.runtime.metrics import CompactionMetrics


def test_counters_and_histogram_with_readable_values() -> None:
    m = CompactionMetrics(CollectorRegistry())
    assert m.compactions() == 0 and m.items_removed() == 0 and m.token_observations() == []
    m.observe(CompactionPlan("compact", {"strategy": "compact"}, "r", 10, 4, 1000, 200))
    m.observe(CompactionPlan("compact", {"strategy": "compact"}, "r", 3, 2, 300, 250))
    m.observe(CompactionPlan("summarize", {"strategy": "summarize"}, "r", 16, 0, 5000, 900))
    m.observe(CompactionPlan("compact", None, "nothing to compact"))
    assert m.compactions("compact") == 2
    assert m.compactions("summarize") == 1
    assert m.compactions() == 3
    assert m.items_removed() == 6
    assert m.token_observations() == [(1000, 200), (300, 250), (5000, 900)]
    assert m.token_histogram_count("before") == m.token_histogram_count("after") == 3
    text = generate_latest(m.registry).decode()
    assert 'session_server_memory_compactions_total{strategy="compact"} 2.0' in text
    assert "session_server_memory_compaction_items_total 6.0" in text
    assert 'session_server_memory_tokens_before_after_bucket{le="1024.0",stage="after"} 3.0' in text


def test_two_instances_do_not_collide() -> None:
    a, b = CompactionMetrics(), CompactionMetrics()
    a.record("compact", items_removed=1)
    assert (a.compactions("compact"), b.compactions("compact")) == (1, 0)
    shared = CollectorRegistry()
    c = CompactionMetrics(shared, namespace="one")
    d = CompactionMetrics(shared, namespace="two")
    d.record("summarize", tokens_before=10, tokens_after=5)
    assert c.compactions() == 0 and d.compactions("summarize") == 1


def test_token_observations_are_bounded() -> None:
    m = CompactionMetrics(keep_observations=2)
    for i in range(5):
        m.record("compact", tokens_before=i, tokens_after=0)
    assert m.token_observations() == [(3, 0), (4, 0)]
