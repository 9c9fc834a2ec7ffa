"""The front door's counters: made once per prometheus registry, named as documented."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from session_server.process.forward_metrics import FAILURE_REASONS, forward_metrics


def test_counters_are_made_once_per_registry_and_exposed() -> None:
    registry = CollectorRegistry()
    metrics = forward_metrics(registry)
    assert forward_metrics(registry) is metrics  # a restarted server reuses them
    assert forward_metrics(CollectorRegistry()) is not metrics
    metrics.connections.inc()
    metrics.calls.inc(3)
    metrics.relocations.inc()
    metrics.failures["not_owner"].inc()
    text = generate_latest(registry).decode()
    assert "session_server_forwarded_connections_total 1.0" in text
    assert "session_server_forwarded_calls_total 3.0" in text
    assert "session_server_forward_relocations_total 1.0" in text
    assert 'session_server_forward_failures_total{reason="not_owner"} 1.0' in text
    for reason in FAILURE_REASONS:
        assert f'session_server_forward_failures_total{{reason="{reason}"}}' in text
