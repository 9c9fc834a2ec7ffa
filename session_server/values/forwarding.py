"""The front door's rules (pure): how a node proves to an owner that it forwards a
client's connection, and what a front door does when a forwarded connection fails.

A node that is not an agent's owner forwards the client's connection to the owner
(``server/forwarding.py``): one upstream WebSocket per client connection, to the owner's
agent endpoint, carrying the client's own token (the owner checks it as if the client had
come directly) and a node credential, ``forward_credential``: an HMAC-SHA256 of the agent
id under the cluster secret every node is given. The credential only says "a node
forwards this": the owner then serves the agent itself or refuses (HTTP 421, not the
owner), and never forwards again, so two nodes that disagree about an owner cannot pass
a connection back and forth.

``after_upstream_end`` decides what the front door does when the upstream ends first:
forget the owner (the directory looks again) and close the client's connection with a
code its reconnection handles (the client resends what is safe, resumes its
subscriptions after the last seq and stream cursor it received, and reports the other
writes as of unknown outcome). ``not_owner_answer`` spots the owner's -32005
``not_owner`` refusal in an answer, after which the front door does the same once the
answer is delivered.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Final
from urllib.parse import quote

import msgspec

__all__ = [
    "FORWARD_HEADER",
    "MIN_CLUSTER_SECRET_BYTES",
    "UpstreamEnd",
    "after_upstream_end",
    "agent_url",
    "credential_valid",
    "forward_credential",
    "not_owner_answer",
]

FORWARD_HEADER: Final = "Session-Server-Forwarded"
"""The handshake header a front door sends to the owner: ``forward_credential``."""

MIN_CLUSTER_SECRET_BYTES: Final = 32
"""A cluster secret is an HMAC-SHA256 key: at least as long as the hash output."""

_LABEL: Final = b"session-server forward v1\x00"

CLOSE_GOING_AWAY: Final = 1001
CLOSE_POLICY: Final = 1008
CLOSE_TRY_AGAIN: Final = 1013
"""The code a client sees when its agent's owner went away: reconnect (RFC 6455 1013,
try again later); ``session_server.client`` reconnects on any code but 1000."""


def forward_credential(secret: bytes, agent_id: str) -> str:
    """The node credential a front door presents to ``agent_id``'s owner."""
    if len(secret) < MIN_CLUSTER_SECRET_BYTES:
        raise ValueError(f"cluster secret: at least {MIN_CLUSTER_SECRET_BYTES} bytes")
    mac = hmac.new(secret, _LABEL + agent_id.encode("utf-8"), hashlib.sha256)
    return mac.hexdigest()


def credential_valid(secret: bytes | None, agent_id: str, presented: str) -> bool:
    """Whether ``presented`` is the node credential for ``agent_id`` (constant time).
    False when this node has no cluster secret."""
    if secret is None or len(secret) < MIN_CLUSTER_SECRET_BYTES:
        return False
    return hmac.compare_digest(forward_credential(secret, agent_id), presented.strip())


def agent_url(base_url: str, agent_id: str) -> str:
    """The agent endpoint of a node whose base URL is ``base_url`` (``ws://host:port``)."""
    return f"{base_url.rstrip('/')}/v1/agents/{quote(agent_id, safe='')}"


class UpstreamEnd(msgspec.Struct, frozen=True):
    """What the front door does when a forwarded connection's upstream ended first:
    ``forget`` the owner in the directory, close the client with ``code`` and ``reason``."""

    forget: bool
    code: int
    reason: str


def after_upstream_end(close_code: int | None, close_reason: str, not_owner: bool) -> UpstreamEnd:
    """The front door's answer to an upstream that ended while the client was connected.

    ``close_code`` is the code the owner closed with (``None``: the TCP connection broke,
    no close frame); ``not_owner``: an answer said the node is no longer the owner.

    - a token the owner no longer accepts (1008) is the client's problem: the same code
      and reason, the owner kept;
    - an idle timeout or a normal close (1000) from the owner: the same code (the owner
      is alive and still the owner);
    - anything else (the owner stopping 1001, an internal error, a broken connection, or
      a ``not_owner`` answer): forget the owner and close with 1013 so the client
      reconnects and the next handshake finds the agent's owner again.
    """
    if not not_owner and close_code == CLOSE_POLICY:
        return UpstreamEnd(False, CLOSE_POLICY, close_reason)
    if not not_owner and close_code == 1000:
        return UpstreamEnd(False, 1000, close_reason)
    why = "the agent's owner is no longer the owner" if not_owner else "the agent's owner went away"
    return UpstreamEnd(True, CLOSE_TRY_AGAIN, f"{why}; reconnect")


class _Error(msgspec.Struct):
    code: int = 0
    data: dict[str, object] | None = None


class _Answer(msgspec.Struct):
    error: _Error | None = None


_ANSWER: Final = msgspec.json.Decoder(_Answer | list[_Answer])
_MARK: Final = b'"not_owner"'


def not_owner_answer(message: bytes | str) -> bool:
    """Whether an answer (or a batch's answers) from the owner holds a -32005 refusal
    with ``data.reason == "not_owner"``. Cheap for every other message: a byte search
    first, the decoding only when the mark is there."""
    data = message.encode("utf-8") if isinstance(message, str) else message
    if _MARK not in data:
        return False
    try:
        decoded = _ANSWER.decode(data)
    except msgspec.DecodeError:
        return False
    answers = decoded if isinstance(decoded, list) else [decoded]
    return any(
        a.error is not None
        and a.error.code == -32005
        and a.error.data is not None
        and a.error.data.get("reason") == "not_owner"
        for a in answers
    )
