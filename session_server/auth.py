"""Bearer-token parsing and matching (pure).

A token spec is ``TOKEN`` (every agent) or ``TOKEN:PATTERN[,PATTERN...]`` where each
pattern is an ``fnmatch`` pattern over agent ids (``agent-prefix-*``); the token may use any
character but ``:`` and ``,`` and whitespace. Several specs form a ``TokenSet``. A request
presents its token either as ``Authorization: Bearer <token>`` or, for browsers (which cannot
set headers on a WebSocket), as a ``Sec-WebSocket-Protocol`` entry ``bearer.<token>``.

Comparison is constant-time per configured token (``hmac.compare_digest``).
"""

from __future__ import annotations

import fnmatch
import hmac
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

__all__ = [
    "BEARER_SUBPROTOCOL_PREFIX",
    "Grant",
    "TokenSet",
    "parse_token_spec",
    "parse_token_specs",
    "token_from_headers",
]

BEARER_SUBPROTOCOL_PREFIX: Final = "bearer."


@dataclass(frozen=True, slots=True)
class Grant:
    """What one token allows: every agent (``patterns`` empty) or agents matching a pattern."""

    token: str
    patterns: tuple[str, ...] = ()

    @property
    def unrestricted(self) -> bool:
        return not self.patterns

    def permits(self, agent_id: str) -> bool:
        """True when this token may address ``agent_id`` (case-sensitive fnmatch)."""
        return self.unrestricted or any(fnmatch.fnmatchcase(agent_id, p) for p in self.patterns)

    def __repr__(self) -> str:  # never print the secret
        return f"Grant(token=<{len(self.token)} chars>, patterns={self.patterns!r})"


def parse_token_spec(spec: str) -> Grant:
    """Parse ``TOKEN`` or ``TOKEN:PATTERN[,PATTERN...]``; raise ``ValueError`` when malformed."""
    spec = spec.strip()
    token, sep, rest = spec.partition(":")
    token = token.strip()
    if not token:
        raise ValueError("token spec: the token must not be empty")
    if any(c.isspace() or c == "," for c in token):
        raise ValueError("token spec: the token must not contain whitespace or ','")
    patterns: tuple[str, ...] = ()
    if sep:
        patterns = tuple(p.strip() for p in rest.split(",") if p.strip())
        if not patterns:
            raise ValueError(f"token spec for a {len(token)}-char token: empty agent pattern list")
    return Grant(token, patterns)


def parse_token_specs(specs: Iterable[str]) -> TokenSet:
    """Parse several specs (blank ones are skipped)."""
    return TokenSet([parse_token_spec(s) for s in specs if s.strip()])


class TokenSet:
    """The configured tokens. Empty means authentication is off."""

    def __init__(self, grants: Sequence[Grant] = ()) -> None:
        self._grants = tuple(grants)

    def __bool__(self) -> bool:
        return bool(self._grants)

    def __len__(self) -> int:
        return len(self._grants)

    @classmethod
    def from_env(cls, value: str | None) -> TokenSet:
        """Parse ``SESSION_SERVER_TOKENS``.

        Plain tokens are comma-separated (``tok1,tok2``). A restricted spec carries its own
        comma-separated patterns, so specs are also separated by ``;`` or whitespace:
        ``tok1:team-a-*,team-b-*;tok2`` is two tokens. A piece without ``:`` is split on
        commas into plain tokens; a piece with ``:`` is one spec.
        """
        if not value:
            return cls()
        specs: list[str] = []
        for piece in value.replace(";", " ").split():
            specs.extend([piece] if ":" in piece else piece.split(","))
        return parse_token_specs(specs)

    def lookup(self, token: str | None) -> Grant | None:
        """The grant for ``token``, or ``None`` when it is not a configured token."""
        if not token:
            return None
        found: Grant | None = None
        candidate = token.encode("utf-8")
        for grant in self._grants:  # no early exit: timing does not reveal which one matched
            if hmac.compare_digest(grant.token.encode("utf-8"), candidate):
                found = grant if found is None else found
        return found


def token_from_headers(authorization: str | None, subprotocols: Sequence[str] = ()) -> str | None:
    """The token a handshake presents: ``Authorization: Bearer`` first, else the first
    ``bearer.<token>`` entry of ``Sec-WebSocket-Protocol`` (already split on commas)."""
    if authorization:
        scheme, _, value = authorization.strip().partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    for proto in subprotocols:
        proto = proto.strip()
        if proto.startswith(BEARER_SUBPROTOCOL_PREFIX) and len(proto) > len(
            BEARER_SUBPROTOCOL_PREFIX
        ):
            return proto[len(BEARER_SUBPROTOCOL_PREFIX) :]
    return None
