"""Operational metrics of a running server on a ``prometheus_client`` registry passed in.

Beside the compaction counters (``metrics.CompactionMetrics``, same registry), with the
default ``namespace="session_server"``:

- ``session_server_requests_total{method,code}``: JSON-RPC requests answered, by method
  (``unknown`` for a name that is not a method, ``invalid`` for an unusable request, so a
  client cannot grow the label set) and outcome (``ok`` or the JSON-RPC error code);
- ``session_server_request_seconds{method}``: histogram of the time to answer, per method;
- ``session_server_open_connections``: WebSocket connections being served;
- ``session_server_open_agents``: agents whose SQLite store is open (read at scrape time);
- ``session_server_actors``: agent actor objects in memory (open stores, calls in flight,
  subscriptions; an evicted agent leaves it), read at scrape time;
- ``session_server_recent_cache_bytes`` (and ``_peak``): bytes the agents' recent-events
  caches hold together (``values.cache_budget``; read at scrape time);
- ``session_server_commit_seconds``: histogram of the time of one SQLite write
  transaction, from handing it to the I/O thread to its commit returning;
- ``session_server_commit_batch_size``: histogram of the writes one commit carries
  (observed once per commit; every commit carries one write until group commit exists);
- ``session_server_mirror_lag_seconds``: histogram of the delay from the first commit of
  a mirror batch to its JSONL files being written;
- ``session_server_summarizer_failures_total``: summaries that failed (nothing written);
- ``session_server_intake_bytes`` (and ``_peak``): request bytes received and not yet
  handed to a handler; ``session_server_frame_permits`` (the pool),
  ``session_server_frame_permits_in_use`` (and ``_peak``): large-frame permits (see
  ``session_server.server.intake``);
- ``session_server_answer_bytes`` (and ``_peak``): answer and notification bytes
  reserved or queued and not yet taken by a socket; ``session_server_answer_waiting``:
  requests waiting for room (see ``session_server.server.connection_pump``);
- ``session_server_skipped_records``: stored rows that could not be read back and were
  skipped (``storage.sqlite_ops.SKIPPED_RECORDS``, process-wide, read at scrape time);
- per agent, for the agents whose store is open (so at most ``max_open`` series each):
  ``session_server_agent_open{agent_id}`` (1) and
  ``session_server_agent_idle_seconds{agent_id}`` (since its last call).

``agent_view(registry, permits)`` is the collector a token limited to some agents
scrapes: only the series labelled with an ``agent_id`` it may address, none of the
server-wide ones.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Metric
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = [
    "BATCH_BUCKETS",
    "LATENCY_BUCKETS",
    "AgentCollector",
    "OperationsMetrics",
    "agent_view",
]

LATENCY_BUCKETS: Final[tuple[float, ...]] = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    float("inf"),
)
BATCH_BUCKETS: Final[tuple[float, ...]] = (1, 2, 4, 8, 16, 32, 64, 128, 256, float("inf"))


class OperationsMetrics:
    """Request, connection, commit, mirror and summarizer instruments (module doc)."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        namespace: str = "session_server",
        open_agents: Callable[[], float] | None = None,
        actors: Callable[[], float] | None = None,
        skipped_records: Callable[[], float] | None = None,
        recent_cache: tuple[Callable[[], float], Callable[[], float]] | None = None,
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.namespace = namespace
        self._prefix = f"{namespace}_" if namespace else ""
        self._request_children: dict[tuple[str, str], tuple[Any, Any]] = {}
        common: dict[str, Any] = {"namespace": namespace, "registry": self.registry}
        self.requests = Counter(
            "requests",
            "JSON-RPC requests answered, by method and code.",
            ["method", "code"],
            **common,
        )
        self.request_seconds = Histogram(
            "request_seconds",
            "Seconds to answer a JSON-RPC request, per method.",
            ["method"],
            buckets=LATENCY_BUCKETS,
            **common,
        )
        self.open_connections = Gauge(
            "open_connections", "WebSocket connections being served.", **common
        )
        self.open_agents = Gauge("open_agents", "Agents whose SQLite store is open.", **common)
        if open_agents is not None:
            self.open_agents.set_function(open_agents)
        self.actors = Gauge("actors", "Agent actor objects in memory.", **common)
        if actors is not None:
            self.actors.set_function(actors)
        self.recent_cache_bytes = Gauge(
            "recent_cache_bytes", "Bytes the recent-events caches hold together.", **common
        )
        self.recent_cache_bytes_peak = Gauge(
            "recent_cache_bytes_peak", "Most bytes the recent-events caches held.", **common
        )
        if recent_cache is not None:
            self.recent_cache_bytes.set_function(recent_cache[0])
            self.recent_cache_bytes_peak.set_function(recent_cache[1])
        self.commit_seconds = Histogram(
            "commit_seconds",
            "Seconds of one SQLite write transaction (queueing on the I/O thread included).",
            buckets=LATENCY_BUCKETS,
            **common,
        )
        self.commit_batch_size = Histogram(
            "commit_batch_size", "Writes carried by one commit.", buckets=BATCH_BUCKETS, **common
        )
        self.mirror_lag_seconds = Histogram(
            "mirror_lag_seconds",
            "Seconds from the first commit of a mirror batch to its files being written.",
            buckets=LATENCY_BUCKETS,
            **common,
        )
        self.skipped_records = Gauge(
            "skipped_records",
            "Stored rows that could not be read back and were skipped (logged).",
            **common,
        )
        if skipped_records is not None:
            self.skipped_records.set_function(skipped_records)
        self.summarizer_failures = Counter(
            "summarizer_failures", "Summaries that failed (nothing was written).", **common
        )
        # The request intake (``session_server.server.intake``); the server sets their functions.
        self.intake_bytes = Gauge(
            "intake_bytes",
            "Request bytes received and not yet handed to a handler, all connections.",
            **common,
        )
        self.intake_bytes_peak = Gauge(
            "intake_bytes_peak", "The most intake_bytes held at once since start.", **common
        )
        self.frame_permits_in_use = Gauge(
            "frame_permits_in_use",
            "Large-frame permits held (messages over the intake threshold being received "
            "or handled).",
            **common,
        )
        self.frame_permits_peak = Gauge(
            "frame_permits_peak", "The most large-frame permits held at once.", **common
        )
        self.frame_permits = Gauge("frame_permits", "Large-frame permits in the pool.", **common)
        # Unread answers (``connection_pump``); the server sets their functions.
        self.answer_bytes = Gauge(
            "answer_bytes",
            "Answer and notification bytes reserved or queued and not yet taken by a "
            "socket, all connections (max_unread_answer_bytes bounds it).",
            **common,
        )
        self.answer_bytes_peak = Gauge(
            "answer_bytes_peak", "The most answer_bytes held at once since start.", **common
        )
        self.answer_waiting = Gauge(
            "answer_waiting", "Requests waiting for room in the unread-answer bound.", **common
        )

    def observe_request(self, method: str, code: str, seconds: float) -> None:
        """One answered request (``code``: ``ok`` or the JSON-RPC error code)."""
        # ``labels()`` looks its child up under a lock on every call: the pair is kept
        # here instead. The keys are bounded: dispatch labels a method it does not know
        # ``unknown`` and codes are the hierarchy's.
        children = self._request_children.get((method, code))
        if children is None:
            children = (
                self.requests.labels(method=method, code=code),
                self.request_seconds.labels(method=method),
            )
            self._request_children[(method, code)] = children
        children[0].inc()
        children[1].observe(seconds)

    def observe_commit(self, seconds: float, batch_size: int = 1) -> None:
        """One commit of ``batch_size`` writes that took ``seconds``."""
        self.commit_seconds.observe(seconds)
        self.commit_batch_size.observe(batch_size)

    def value(self, name: str, labels: dict[str, str] | None = None) -> float:
        """A sample's current value (0 when absent), e.g. ``value("requests_total", {...})``."""
        found = self.registry.get_sample_value(self._prefix + name, labels or {})
        return 0.0 if found is None else float(found)


class AgentCollector(Collector):
    """Per-agent series, computed at scrape time from ``open_agents()``: ``(agent_id,
    seconds idle)`` of each agent whose store is open."""

    def __init__(
        self, open_agents: Callable[[], Iterable[tuple[str, float]]], namespace: str
    ) -> None:
        self._open_agents = open_agents
        self._prefix = f"{namespace}_" if namespace else ""

    def collect(self) -> Iterator[Metric]:
        is_open = GaugeMetricFamily(
            f"{self._prefix}agent_open", "1 for an agent whose store is open.", labels=["agent_id"]
        )
        idle = GaugeMetricFamily(
            f"{self._prefix}agent_idle_seconds",
            "Seconds since the agent's last call (agents whose store is open).",
            labels=["agent_id"],
        )
        for agent_id, seconds in self._open_agents():
            is_open.add_metric([agent_id], 1.0)
            idle.add_metric([agent_id], seconds)
        yield is_open
        yield idle


class _AgentView(Collector):
    def __init__(self, registry: CollectorRegistry, permits: Callable[[str], bool]) -> None:
        self._registry = registry
        self._permits = permits

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            samples = [
                s
                for s in family.samples
                if "agent_id" in s.labels and self._permits(s.labels["agent_id"])
            ]
            if samples:
                view = Metric(family.name, family.documentation, family.type, family.unit)
                view.samples = samples
                yield view


def agent_view(registry: CollectorRegistry, permits: Callable[[str], bool]) -> Collector:
    """What a token limited to some agents may scrape of ``registry``: the series labelled
    with an ``agent_id`` that ``permits`` allows, nothing server-wide."""
    return _AgentView(registry, permits)
