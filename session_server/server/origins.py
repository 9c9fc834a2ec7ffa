"""Which browser origins may talk to the server (pure: no I/O).

A browser sends ``Origin`` with every WebSocket handshake and with cross-origin HTTP
requests; a page from another site must not read or delete an agent's memory through
the user's browser (the server on 127.0.0.1 is reachable from any page the browser
opens). The rule: a request without ``Origin`` (a program, not a page) passes; one whose
``Origin`` is the server's own (same scheme, host and port as the request's ``Host``)
passes, so the Memory Inspector served by the server keeps working; any other passes only
when the operator allowed it (``--allow-origin``; ``*`` allows any). The server answers
the others HTTP 403.

Origins are compared normalized: scheme and host lower-case, the default port written
out (``http://Example.com`` is ``http://example.com:80``). ``null`` (sandboxed frames,
``file:`` pages) is an origin of its own, allowed only by name or by ``*``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final
from urllib.parse import urlsplit

import msgspec

__all__ = ["ANY_ORIGIN", "OriginPolicy", "normalize_origin", "parse_allowed_origin"]

ANY_ORIGIN: Final = "*"
NULL_ORIGIN: Final = "null"
_DEFAULT_PORTS: Final = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def normalize_origin(text: str) -> str | None:
    """``scheme://host:port`` (lower-case, port written out), ``null``, or ``None`` when
    ``text`` is not an origin (a path, a query, user info or an unknown scheme)."""
    text = text.strip()
    if text.lower() == NULL_ORIGIN:
        return NULL_ORIGIN
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = parts.hostname
    if (
        scheme not in _DEFAULT_PORTS
        or not host
        or parts.username is not None
        or parts.password is not None
        or parts.path not in ("", "/")
        or parts.query
        or parts.fragment
    ):
        return None
    if port is None:
        port = _DEFAULT_PORTS[scheme]
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}:{port}"


def parse_allowed_origin(text: str) -> str:
    """One ``--allow-origin`` value: ``*``, ``null`` or an origin (normalized). Raises
    ``ValueError`` naming the value when it is none of these."""
    if text.strip() == ANY_ORIGIN:
        return ANY_ORIGIN
    origin = normalize_origin(text)
    if origin is None:
        raise ValueError(
            f"allow-origin: {text[:200]!r} is not an origin; give scheme://host[:port] "
            "(e.g. http://localhost:3000), null, or * for any"
        )
    return origin


class OriginPolicy(msgspec.Struct, frozen=True):
    """The origins allowed besides the server's own (``allowed``, normalized), or any."""

    allowed: frozenset[str] = frozenset()
    any: bool = False

    @classmethod
    def of(cls, specs: Iterable[str]) -> OriginPolicy:
        """The policy for these ``--allow-origin`` values (``ValueError`` names a bad one)."""
        parsed = {parse_allowed_origin(spec) for spec in specs}
        return cls(allowed=frozenset(parsed - {ANY_ORIGIN}), any=ANY_ORIGIN in parsed)

    def same_origin(self, origin: str, host: str | None, scheme: str = "http") -> bool:
        """Whether ``origin`` is the server's own for a request with this ``Host``."""
        if not host:
            return False
        own = normalize_origin(f"{scheme}://{host.strip()}")
        return own is not None and normalize_origin(origin) == own

    def cross_origin_allowed(self, origin: str) -> bool:
        """Whether the operator allowed ``origin`` (not the server's own)."""
        return self.any or normalize_origin(origin) in self.allowed

    def refusal(self, origin: str | None, host: str | None, scheme: str = "http") -> str | None:
        """Why a request with this ``Origin`` and ``Host`` is refused, or ``None``."""
        if origin is None:
            return None
        if self.same_origin(origin, host, scheme) or self.cross_origin_allowed(origin):
            return None
        return (
            f"Origin {origin[:200]!r} is not allowed: this server answers pages of its own "
            "origin and those allowed with --allow-origin"
        )
