"""Compaction metrics on a ``prometheus_client`` registry passed in.

Metric names (with the default ``namespace="session_server"``):

- ``session_server_memory_compactions_total{strategy}``: compactions written;
- ``session_server_memory_compaction_items_total``: tool payloads replaced by
  placeholders;
- ``session_server_memory_tokens_before_after{stage="before"|"after"}``: histogram of the
  built context's token count before and after each compaction;
- ``session_server_memory_summary_problems_total{kind}``: ``failed``, ``slow``, ``futile``
  and ``fallback`` summaries (see the counter's help).

Each ``CompactionMetrics`` registers on its own ``CollectorRegistry`` (a fresh one when
none is given), so tests and several servers in one process do not collide. The plain
accessors read the registry back.
"""

from __future__ import annotations

from collections import deque
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Histogram

from ..compaction.records import CompactionPlan

__all__ = ["TOKEN_BUCKETS", "CompactionMetrics"]

TOKEN_BUCKETS: Final[tuple[float, ...]] = (
    256,
    1_024,
    4_096,
    16_384,
    32_768,
    65_536,
    131_072,
    262_144,
    524_288,
    1_048_576,
    float("inf"),
)


class CompactionMetrics:
    """Counters and a histogram for compactions, with plain readable values."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        namespace: str = "session_server",
        keep_observations: int = 1024,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._prefix = f"{namespace}_" if namespace else ""
        self._compactions = Counter(
            "memory_compactions",
            "Compactions written, by strategy.",
            ["strategy"],
            namespace=namespace,
            registry=self.registry,
        )
        self._items = Counter(
            "memory_compaction_items",
            "Tool payloads replaced by placeholders.",
            namespace=namespace,
            registry=self.registry,
        )
        self._tokens = Histogram(
            "memory_tokens_before_after",
            "Tokens of the built context before and after a compaction.",
            ["stage"],
            namespace=namespace,
            registry=self.registry,
            buckets=TOKEN_BUCKETS,
        )
        self._summary_problems = Counter(
            "memory_summary_problems",
            "Summaries that failed or timed out (failed), builds that answered without "
            "waiting for a slow one (slow), automatic summaries that would gain nothing "
            "(futile), placeholder records written while a summary was slow or failing "
            "(fallback).",
            ["kind"],
            namespace=namespace,
            registry=self.registry,
        )
        self._observations: deque[tuple[int, int]] = deque(maxlen=keep_observations)

    def record(
        self,
        strategy: str,
        *,
        items_removed: int = 0,
        tokens_before: int | None = None,
        tokens_after: int | None = None,
    ) -> None:
        """Count one compaction written with ``strategy``."""
        self._compactions.labels(strategy=strategy).inc()
        if items_removed > 0:
            self._items.inc(items_removed)
        if tokens_before is not None and tokens_after is not None:
            self._tokens.labels(stage="before").observe(tokens_before)
            self._tokens.labels(stage="after").observe(tokens_after)
            self._observations.append((tokens_before, tokens_after))

    def observe(self, plan: CompactionPlan) -> None:
        """Record a plan whose record was written; a no-op plan counts nothing."""
        if plan.record is None:
            return
        self.record(
            plan.strategy,
            items_removed=plan.items_removed,
            tokens_before=plan.tokens_before,
            tokens_after=plan.tokens_after,
        )

    def summary_failed(self) -> None:
        self._summary_problems.labels(kind="failed").inc()

    def summary_slow(self) -> None:
        self._summary_problems.labels(kind="slow").inc()

    def compaction_futile(self) -> None:
        self._summary_problems.labels(kind="futile").inc()

    def summary_fallback(self) -> None:
        self._summary_problems.labels(kind="fallback").inc()

    def summary_problems(self) -> dict[str, int]:
        """``{failed, slow, futile, fallback}`` counts (see the counter's help)."""
        return {
            kind: int(self._value("memory_summary_problems_total", {"kind": kind}))
            for kind in ("failed", "slow", "futile", "fallback")
        }

    def _value(self, name: str, labels: dict[str, str] | None = None) -> float:
        value = self.registry.get_sample_value(self._prefix + name, labels or {})
        return 0.0 if value is None else float(value)

    def compactions(self, strategy: str | None = None) -> int:
        """Compactions written with ``strategy`` (all strategies when ``None``)."""
        if strategy is not None:
            return int(self._value("memory_compactions_total", {"strategy": strategy}))
        return sum(
            int(sample.value)
            for metric in self._compactions.collect()
            for sample in metric.samples
            if sample.name.endswith("_total")
        )

    def items_removed(self) -> int:
        return int(self._value("memory_compaction_items_total"))

    def token_observations(self) -> list[tuple[int, int]]:
        """``(before, after)`` pairs, oldest first (the last ``keep_observations``)."""
        return list(self._observations)

    def token_histogram_count(self, stage: str = "before") -> int:
        return int(self._value("memory_tokens_before_after_count", {"stage": stage}))
