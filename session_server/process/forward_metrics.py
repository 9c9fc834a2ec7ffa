"""The front door's Prometheus counters (cluster mode), on the registry's
``prometheus_client`` registry, beside ``ops_metrics.OperationsMetrics``:

- ``session_server_forwarded_connections_total``: client connections this node forwarded
  to the agent's owner (``server.forwarding``);
- ``session_server_forwarded_calls_total``: client frames (a request, a notification or a
  batch) forwarded to an owner;
- ``session_server_forward_failures_total{reason}``: forwarded connections that could not
  be opened or ended on the owner's side: ``unreachable`` (no connection to the owner),
  ``not_owner`` (the owner refused: another node owns the agent now), ``dropped`` (the
  owner went away while the client was connected);
- ``session_server_forward_relocations_total``: times the front door forgot an owner and
  looked the agent up again (a link reconnect).

Counters are made once per prometheus registry (a server restarted on the same actor
registry reuses them).
"""

from __future__ import annotations

import weakref
from typing import Final

from prometheus_client import CollectorRegistry, Counter

__all__ = ["FAILURE_REASONS", "ForwardMetrics", "forward_metrics"]

FAILURE_REASONS: Final = ("unreachable", "not_owner", "dropped")


class ForwardMetrics:
    """The counters of one prometheus registry (module doc)."""

    def __init__(self, registry: CollectorRegistry, namespace: str = "session_server") -> None:
        common = {"namespace": namespace, "registry": registry}
        self.connections = Counter(
            "forwarded_connections",
            "Client connections forwarded to the agent's owner.",
            **common,  # type: ignore[arg-type]
        )
        self.calls = Counter(
            "forwarded_calls",
            "Client frames (requests, notifications, batches) forwarded to an owner.",
            **common,  # type: ignore[arg-type]
        )
        failures = Counter(
            "forward_failures",
            "Forwarded connections that failed, by reason.",
            ["reason"],
            **common,  # type: ignore[arg-type]
        )
        self.failures = {reason: failures.labels(reason=reason) for reason in FAILURE_REASONS}
        self.relocations = Counter(
            "forward_relocations",
            "Owners forgotten and looked up again after a failed forward.",
            **common,  # type: ignore[arg-type]
        )


_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, ForwardMetrics] = (
    weakref.WeakKeyDictionary()
)


def forward_metrics(
    registry: CollectorRegistry, namespace: str = "session_server"
) -> ForwardMetrics:
    """The front door's counters on ``registry`` (made at the first call)."""
    metrics = _BY_REGISTRY.get(registry)
    if metrics is None:
        metrics = _BY_REGISTRY[registry] = ForwardMetrics(registry, namespace)
    return metrics
