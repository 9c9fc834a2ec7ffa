"""``ConnectionHost``: what a client connection (``connection_pump.Connection``) reads of
its server; ``SessionServer`` is one. A protocol, so the connection imports no server."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol

from ..concurrency.flow import ByteBudget, Permits
from ..rpc.method_spec import MethodSpec
from .fanout import SubscriberLimits, Topic

if TYPE_CHECKING:
    from ..runtime.actor import AgentActor
    from ..runtime.registry import ActorRegistry

__all__ = ["ConnectionHost"]


class ConnectionHost(SubscriberLimits, Protocol):
    """What a connection reads of its server (``SessionServer``): the bounds, the
    method table, the shared budgets, the topics and the stop deadline."""

    @property
    def registry(self) -> ActorRegistry: ...
    @property
    def methods(self) -> Mapping[str, MethodSpec]: ...
    @property
    def clock(self) -> Callable[[], float]: ...
    @property
    def max_inflight(self) -> int: ...
    @property
    def max_outgoing_bytes(self) -> int: ...
    @property
    def max_batch(self) -> int: ...
    @property
    def max_answer_bytes(self) -> int: ...
    @property
    def max_subscriptions(self) -> int: ...
    @property
    def idle_timeout(self) -> float | None: ...
    @property
    def budget(self) -> ByteBudget: ...
    @property
    def answer_budget(self) -> ByteBudget: ...
    @property
    def write_timeout(self) -> float | None: ...
    @property
    def permits(self) -> Permits: ...
    @property
    def stopping(self) -> bool: ...
    @property
    def forwarding(self) -> bool:
        """Cluster mode: agents may be served by another node (``forwarding``)."""
        ...

    def topic_for(self, actor: AgentActor, session_id: str) -> Topic: ...

    def remaining_stop_time(self) -> float | None: ...
