"""Prometheus counters of usage and retention, on the registry the server scrapes.

- ``session_server_usage_tokens_total{group,kind}``: tokens reported with persisted
  turns (``kind``: ``input``, ``output``, ``cached_input``, ``cache_write``,
  ``reasoning``);
- ``session_server_usage_cost_total{group}``: their cost at the server's prices (turns of
  an unpriced model add nothing);
- ``session_server_retention_sweeps_total``: retention sweeps of an agent;
- ``session_server_retention_sessions_erased_total{reason}``: sessions erased by retention
  (``max_age_days``, ``max_idle_days``, ``max_sessions``);
- ``session_server_retention_events_erased_total``: raw events erased (``max_raw_events``).

``group`` is never a raw agent id unless the operator asks: ``AgentLabel`` maps an agent id
to a label with the operator's regular expression (its first group, or the whole match),
``"all"`` without one, and at most ``max_labels`` distinct values (then ``"other"``).
"""

from __future__ import annotations

import re
import threading
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter

from ..values.usage import USAGE_FIELDS, UsageTotals

__all__ = ["MAX_LABELS", "AgentLabel", "UsageMetrics"]

MAX_LABELS: Final = 100
_KINDS: Final = tuple(f.removesuffix("_tokens") for f in USAGE_FIELDS)


class AgentLabel:
    """The bounded metrics label of an agent (module docstring)."""

    def __init__(self, pattern: str | None = None, max_labels: int = MAX_LABELS) -> None:
        self.pattern = None if pattern is None else re.compile(pattern)
        self.max_labels = max_labels
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, agent_id: str) -> str:
        if self.pattern is None:
            return "all"
        match = self.pattern.search(agent_id)
        if match is None:
            return "other"
        label = match.group(1) if self.pattern.groups else match.group(0)
        with self._lock:
            if label in self._seen:
                return label
            if len(self._seen) >= self.max_labels:
                return "other"
            self._seen.add(label)
        return label


class UsageMetrics:
    """The counters of the module docstring."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        namespace: str = "session_server",
        label: AgentLabel | None = None,
    ) -> None:
        self.label = label or AgentLabel()
        self._children: dict[str, tuple[Any, ...]] = {}
        ns, reg = namespace, registry
        self.tokens = Counter(
            "usage_tokens",
            "Tokens reported with persisted turns.",
            ["group", "kind"],
            namespace=ns,
            registry=reg,
        )
        self.cost = Counter(
            "usage_cost",
            "Cost of persisted turns at the server's prices.",
            ["group"],
            namespace=ns,
            registry=reg,
        )
        self.sweeps = Counter(
            "retention_sweeps", "Retention sweeps of an agent.", namespace=ns, registry=reg
        )
        self.sessions_erased = Counter(
            "retention_sessions_erased",
            "Sessions erased by retention, by reason.",
            ["reason"],
            namespace=ns,
            registry=reg,
        )
        self.events_erased = Counter(
            "retention_events_erased", "Raw events erased by retention.", namespace=ns, registry=reg
        )

    def turn(self, agent_id: str, usage: UsageTotals, cost: float | None) -> None:
        group = self.label(agent_id)
        children = self._children.get(group)
        if children is None:  # at most max_labels + 2 groups
            children = tuple(self.tokens.labels(group, kind) for kind in _KINDS)
            self._children[group] = children
        for child, count in zip(children, usage.counts(), strict=True):
            if count:
                child.inc(count)
        if cost:
            self.cost.labels(group).inc(cost)
