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
from collections.abc import Iterator
from typing import Final

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

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
    """The counters of the module docstring.

    The token and cost counters are summed in plain dicts and read by a collector at
    scrape time: counting a turn is a few additions under one lock, not one locked
    ``Counter`` child per kind (on the path of every ``turn.persist`` with usage)."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        namespace: str = "session_server",
        label: AgentLabel | None = None,
    ) -> None:
        self.label = label or AgentLabel()
        self._groups: dict[str, str] = {}  # agent id -> label, bounded like the labels
        self._tokens: dict[str, list[int]] = {}  # group -> counts in _KINDS order
        self._cost: dict[str, float] = {}
        self._lock = threading.Lock()
        ns, reg = namespace, registry
        self.names = (f"{ns}_usage_tokens", f"{ns}_usage_cost")
        reg.register(_UsageCollector(self))
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

    def _group(self, agent_id: str) -> str:
        group = self._groups.get(agent_id)
        if group is None:
            group = self.label(agent_id)
            if len(self._groups) >= MAX_CACHED_AGENTS:
                self._groups.clear()
            self._groups[agent_id] = group
        return group

    def turn(self, agent_id: str, usage: UsageTotals, cost: float | None) -> None:
        """Count one persisted turn's tokens (and cost, when priced)."""
        group = self._group(agent_id)
        counts = usage.counts()
        with self._lock:
            have = self._tokens.get(group)
            if have is None:  # at most max_labels + 2 groups
                self._tokens[group] = list(counts)
            else:
                for i, v in enumerate(counts):
                    have[i] += v
            if cost:
                self._cost[group] = self._cost.get(group, 0.0) + cost

    def snapshot(self) -> tuple[dict[str, list[int]], dict[str, float]]:
        """The token and cost totals per group, copied."""
        with self._lock:
            return {g: list(c) for g, c in self._tokens.items()}, dict(self._cost)


MAX_CACHED_AGENTS: Final = 10_000


class _UsageCollector(Collector):
    """``session_server_usage_tokens_total`` and ``..._usage_cost_total`` at scrape time."""

    def __init__(self, metrics: UsageMetrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        tokens, cost = self.metrics.snapshot()
        names = self.metrics.names
        family = CounterMetricFamily(
            names[0], "Tokens reported with persisted turns.", labels=["group", "kind"]
        )
        for group, counts in sorted(tokens.items()):
            for kind, value in zip(_KINDS, counts, strict=True):
                family.add_metric([group, kind], value)
        yield family
        money = CounterMetricFamily(
            names[1], "Cost of persisted turns at the server's prices.", labels=["group"]
        )
        for group, amount in sorted(cost.items()):
            money.add_metric([group], amount)
        yield money

    def describe(self) -> Iterator[Metric]:
        names = self.metrics.names
        yield CounterMetricFamily(names[0], "", labels=["group", "kind"])
        yield CounterMetricFamily(names[1], "", labels=["group"])
