"""Which node a client talks to when it was given several (pure): DESIGN §12,
"``SessionClient`` accepts a list of URLs".

``endpoint_urls`` turns the ``url`` argument (one base URL, or a sequence of them: the
nodes of a cluster, any of which serves any agent) into the endpoint URLs the client
opens, in the order given. The client keeps a current index: it connects to the first
that answers, moving on to the next one (``next_index``) after a failed opening, a
dropped connection, or a refusal that says another node should be asked
(``moves_on``); it waits (``Backoff``) only after a whole round of the list failed
(``round_done``), so one dead node costs no wait when another answers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote

__all__ = ["endpoint_urls", "moves_on", "next_index", "round_done"]

MOVING_REASONS = frozenset({"not_owner"})
"""Reasons of a retryable -32005 answer that another node may not give."""


def endpoint_urls(url: str | Sequence[str], agent_id: str | None) -> tuple[str, ...]:
    """The endpoint of ``agent_id`` (``/v1`` when ``None``) at each base URL."""
    bases = [url] if isinstance(url, str) else list(url)
    if not bases:
        raise ValueError("url: give at least one server URL")
    urls: list[str] = []
    for base in bases:
        if not isinstance(base, str) or not base.startswith(("ws://", "wss://")):
            raise ValueError(f"url: {base!r} is not a ws:// or wss:// URL")
        base = base.rstrip("/")
        urls.append(
            f"{base}/v1" if agent_id is None else f"{base}/v1/agents/{quote(agent_id, safe='')}"
        )
    return tuple(urls)


def next_index(index: int, count: int) -> int:
    """The node after ``index`` (the first after the last)."""
    return (index + 1) % count


def round_done(attempt: int, count: int) -> bool:
    """Whether failed opening ``attempt`` (0-based, counted over the whole outage) ended a
    round of the ``count`` URLs: then the client waits before the next attempt."""
    return (attempt + 1) % count == 0


def moves_on(data: Mapping[str, Any] | None) -> bool:
    """Whether a retryable -32005 refusal with ``data`` sends the client to another node
    (the node no longer owns the agent) rather than waiting at this one."""
    if not data or not data.get("retryable"):
        return False
    return data.get("reason") in MOVING_REASONS
