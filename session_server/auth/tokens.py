"""Bearer tokens: static specs, signed (HS256 JWT) tokens, scopes (pure: no I/O).

**Static tokens.** A spec is ``TOKEN``, ``TOKEN:PATTERN[,PATTERN...]`` or
``TOKEN:PATTERN[,PATTERN...]:SCOPE``: each pattern is an ``fnmatch`` pattern over agent ids
(``agent-prefix-*``), ``SCOPE`` is ``read``, ``write`` or ``admin``. A static token without
a scope is ``admin`` (it is the operator's own key). The token may use any character but
``:`` and ``,`` and whitespace. Several specs form a ``TokenSet``; comparison is
constant-time per configured token (``hmac.compare_digest``).

**Signed tokens.** With one or more secrets, ``Authenticator`` also accepts HS256 JWTs
(verified with PyJWT) whose claims are ``agents`` (fnmatch patterns), optional ``sessions``
(session ids), ``scope`` and ``exp`` (seconds since the epoch; finite and at most
``MAX_TTL_SECONDS`` + ``MAX_CLOCK_SKEW_SECONDS`` ahead of the server's clock).
``mint_token`` makes one.

**Scopes.** ``read`` < ``write`` < ``admin``: each allows what the one before does and more.
Which scope a method needs is on its entry in the method table (``rpc.methods``).

A request presents its token either as ``Authorization: Bearer <token>`` or, for browsers
(which cannot set headers on a WebSocket), as a ``Sec-WebSocket-Protocol`` entry
``bearer.<token>``. A refusal (``TokenRejectedError``) carries one of a few fixed reasons:
it never echoes the token, a claim value or anything about the secret.
"""

from __future__ import annotations

import fnmatch
import hmac
import math
import re
import time
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal, get_args

import jwt
import msgspec

from ..values.errors import ForbiddenError

__all__ = [
    "BEARER_SUBPROTOCOL_PREFIX",
    "DEFAULT_STATIC_SCOPE",
    "MAX_CLOCK_SKEW_SECONDS",
    "MAX_TTL_SECONDS",
    "MIN_SECRET_BYTES",
    "REASON_EXPIRED",
    "SCOPES",
    "Authenticator",
    "Grant",
    "Scope",
    "TokenClaims",
    "TokenRejectedError",
    "TokenSet",
    "mint_token",
    "parse_secrets",
    "parse_token_file",
    "parse_token_spec",
    "parse_token_specs",
    "scope_allows",
    "split_env_specs",
    "token_from_headers",
]

BEARER_SUBPROTOCOL_PREFIX: Final = "bearer."

Scope = Literal["read", "write", "admin"]
SCOPES: Final[tuple[Scope, ...]] = get_args(Scope)
DEFAULT_STATIC_SCOPE: Final[Scope] = "admin"
_SCOPE_BY_NAME: Final[dict[str, Scope]] = {s: s for s in SCOPES}
ALGORITHM: Final = "HS256"
# RFC 7518 §3.2: an HS256 key must be at least as long as the hash output.
MIN_SECRET_BYTES: Final = 32
# Tokens are meant to expire; a year is the longest a minted token may live.
MAX_TTL_SECONDS: Final = 366 * 24 * 3600
# A signed token's ``exp`` may lie at most this far beyond MAX_TTL_SECONDS from the server's
# clock (the minting backend's clock may run a little ahead).
MAX_CLOCK_SKEW_SECONDS: Final = 300
# Bounds on what a token may carry (a token travels in one HTTP header).
MAX_CLAIM_ITEMS: Final = 256
MAX_CLAIM_ITEM_CHARS: Final = 256

# The reasons a handshake refusal gives. Fixed strings: they say what kind of problem the
# token has and nothing about the token, its claims' values or the secret.
REASON_MISSING: Final = "a token is required (Authorization: Bearer <token>, or a Sec-WebSocket-Protocol entry bearer.<token>)"
REASON_UNKNOWN: Final = "unknown token"
REASON_MALFORMED: Final = "malformed token"
REASON_SIGNATURE: Final = "token signature does not verify"
REASON_ALGORITHM: Final = "token is not signed with HS256"
REASON_EXPIRED: Final = "token expired"
REASON_NOT_YET: Final = "token not valid yet"
REASON_EXP_RANGE: Final = (
    "token claims invalid: exp: must be a finite time at most "
    f"{MAX_TTL_SECONDS + MAX_CLOCK_SKEW_SECONDS} seconds from now"
)
REASON_NBF_RANGE: Final = "token claims invalid: nbf: must be a finite time"


def scope_allows(granted: Scope, needed: Scope) -> bool:
    """True when a token of scope ``granted`` may call a method that needs ``needed``."""
    return SCOPES.index(granted) >= SCOPES.index(needed)


class TokenRejectedError(ForbiddenError):
    """A token is not (or no longer) valid. ``reason`` is safe to show the presenter;
    at the handshake it is the body of the 401, on an open connection the error message."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason, data={"field": "token", "reason": reason})
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Grant:
    """What one presented token allows.

    ``patterns`` empty: every agent. ``sessions`` ``None``: every session of those agents.
    ``expires_at`` (seconds since the epoch) is ``None`` for static tokens. ``token`` is the
    presented token itself, kept so that a rotation can re-check it (never printed).
    """

    token: str
    patterns: tuple[str, ...] = ()
    scope: Scope = DEFAULT_STATIC_SCOPE
    sessions: frozenset[str] | None = None
    expires_at: float | None = None
    signed: bool = False
    # The ``blocks`` claim: a ``write`` token may also write the agent's memory blocks
    # (without it that takes ``admin``).
    blocks: bool = False

    def __post_init__(self) -> None:
        # Agent ids are compared in NFC (``validate_agent_id``); so are the patterns.
        nfc = tuple(unicodedata.normalize("NFC", p) for p in self.patterns)
        if nfc != self.patterns:
            object.__setattr__(self, "patterns", nfc)

    @property
    def unrestricted(self) -> bool:
        return not self.patterns

    def permits(self, agent_id: str) -> bool:
        """True when this token may address ``agent_id`` (case-sensitive fnmatch)."""
        return self.unrestricted or any(fnmatch.fnmatchcase(agent_id, p) for p in self.patterns)

    def permits_session(self, session_id: str | None) -> bool:
        """True when this token may address ``session_id`` (``None``: the agent as a whole,
        which a token limited to sessions may not)."""
        return self.sessions is None or (session_id is not None and session_id in self.sessions)

    def allows(self, needed: Scope) -> bool:
        return scope_allows(self.scope, needed)

    def allows_agent_blocks(self) -> bool:
        """True when this token may write the agent's memory blocks: ``admin``, or
        ``write`` with the ``blocks`` claim."""
        return self.allows("admin") or (self.blocks and self.allows("write"))

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def __repr__(self) -> str:  # never print the secret
        return (
            f"Grant(token=<{len(self.token)} chars>, patterns={self.patterns!r}, "
            f"scope={self.scope!r}, sessions={self.sessions!r}, expires_at={self.expires_at!r}, "
            f"blocks={self.blocks!r})"
        )


def parse_token_spec(spec: str) -> Grant:
    """Parse ``TOKEN``, ``TOKEN:PATTERNS`` or ``TOKEN:PATTERNS:SCOPE``; ``ValueError`` when
    malformed. A last ``:read``/``:write``/``:admin`` is the scope (so an agent pattern that
    itself ends in ``:read`` needs an explicit scope after it: ``tok:a:read:admin``).
    ``TOKEN:read`` (a scope name as the only pattern) is refused as ambiguous; the error
    never contains the token."""
    spec = spec.strip()
    token, sep, rest = spec.partition(":")
    token = token.strip()
    if not token:
        raise ValueError("token spec: the token must not be empty")
    if any(c.isspace() or c == "," for c in token):
        raise ValueError("token spec: the token must not contain whitespace or ','")
    patterns: tuple[str, ...] = ()
    scope: Scope = DEFAULT_STATIC_SCOPE
    if sep:
        if rest.strip() in SCOPES:
            # ``tok:read`` reads as the agent pattern ``read`` with scope admin: the
            # opposite of what its writer most likely meant. Refused rather than guessed.
            name = rest.strip()
            raise ValueError(
                f"token spec: TOKEN:{name} is ambiguous (the agent pattern {name!r} or the "
                f"scope {name}?): write TOKEN:*:{name} for every agent with scope {name}, "
                f"or TOKEN:{name}:admin for an agent named {name!r}"
            )
        head, colon, last = rest.rpartition(":")
        if colon and last.strip() in SCOPES:
            scope = _SCOPE_BY_NAME[last.strip()]
            rest = head
        patterns = tuple(p.strip() for p in rest.split(",") if p.strip())
        if not patterns:
            raise ValueError(f"token spec for a {len(token)}-char token: empty agent pattern list")
    return Grant(token, patterns, scope)


def parse_token_specs(specs: Iterable[str]) -> TokenSet:
    """Parse several specs (blank ones are skipped); a ``ValueError`` names the position
    of the malformed spec (1-based, blank ones counted), never its token."""
    grants: list[Grant] = []
    for number, spec in enumerate(specs, 1):
        if not spec.strip():
            continue
        try:
            grants.append(parse_token_spec(spec))
        except ValueError as exc:
            raise ValueError(f"spec {number}: {exc}") from None
    return TokenSet(grants)


def parse_token_file(text: str) -> list[str]:
    """The specs of a token file: one per line; blank lines and lines starting with ``#``
    are skipped. Raises ``ValueError`` naming the line of a malformed spec."""
    specs: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            parse_token_spec(line)
        except ValueError as exc:
            raise ValueError(f"line {number}: {exc}") from None
        specs.append(line)
    return specs


def parse_secrets(text: str) -> tuple[bytes, ...]:
    """The HS256 secrets in ``text``: one per non-blank line (surrounding whitespace is not
    part of a secret). The first signs new tokens; every one verifies, so a rotation can keep
    the old secret on a later line until its tokens have expired. ``ValueError`` when there
    is none or one is shorter than ``MIN_SECRET_BYTES``."""
    secrets: list[bytes] = []
    for number, line in enumerate(text.splitlines(), 1):
        value = line.strip().encode("utf-8")
        if not value:
            continue
        if len(value) < MIN_SECRET_BYTES:
            raise ValueError(
                f"token secret on line {number}: must be at least {MIN_SECRET_BYTES} bytes, "
                f"got {len(value)}"
            )
        secrets.append(value)
    if not secrets:
        raise ValueError("token secret: empty (expected one secret per line)")
    return tuple(secrets)


def split_env_specs(value: str | None) -> list[str]:
    """The specs in ``SESSION_SERVER_TOKENS``.

    Plain tokens are comma-separated (``tok1,tok2``). A restricted spec carries its own
    comma-separated patterns, so specs are also separated by ``;`` or whitespace:
    ``tok1:team-a-*,team-b-*;tok2`` is two tokens. A piece without ``:`` is split on
    commas into plain tokens; a piece with ``:`` is one spec.
    """
    specs: list[str] = []
    for piece in (value or "").replace(";", " ").split():
        specs.extend([piece] if ":" in piece else piece.split(","))
    return specs


class TokenSet:
    """The configured static tokens. Empty means: no static token is accepted."""

    def __init__(self, grants: Sequence[Grant] = ()) -> None:
        self._grants = tuple(grants)

    def __bool__(self) -> bool:
        return bool(self._grants)

    def __len__(self) -> int:
        return len(self._grants)

    @classmethod
    def from_env(cls, value: str | None) -> TokenSet:
        """Parse ``SESSION_SERVER_TOKENS``.

        See ``split_env_specs``."""
        return parse_token_specs(split_env_specs(value))

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


_MAX_EXP_AHEAD: Final = MAX_TTL_SECONDS + MAX_CLOCK_SKEW_SECONDS

_Item = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_CLAIM_ITEM_CHARS)]
_Items = Annotated[list[_Item], msgspec.Meta(min_length=1, max_length=MAX_CLAIM_ITEMS)]


class TokenClaims(msgspec.Struct, frozen=True, omit_defaults=True):
    """The claims of a signed token this server reads (others, e.g. ``sub``, are kept by
    the token but ignored here)."""

    agents: _Items
    scope: Scope
    exp: int | float
    sessions: _Items | None = None
    nbf: int | float | None = None
    blocks: bool | None = None


def mint_token(
    secret: str | bytes,
    *,
    agents: Sequence[str],
    scope: Scope,
    ttl: float,
    sessions: Sequence[str] | None = None,
    now: float | None = None,
    blocks: bool = False,
) -> str:
    """A signed token (HS256 JWT) for ``agents`` (fnmatch patterns), optionally limited to
    ``sessions``, with ``scope``, valid for ``ttl`` seconds from ``now`` (default: the time).

    This is what a backend calls to hand one user a token for that user's session::

        mint_token(secret, agents=["support-bot"], sessions=[sid], scope="read", ttl=900)

    ``blocks``: a ``write`` token may also write the agent's memory blocks.
    """
    key = secret.encode("utf-8") if isinstance(secret, str) else secret
    if len(key.strip()) < MIN_SECRET_BYTES:
        raise ValueError(f"secret: must be at least {MIN_SECRET_BYTES} bytes")
    if isinstance(agents, str) or (sessions is not None and isinstance(sessions, str)):
        raise ValueError("agents and sessions: must be lists of strings, not one string")
    if scope not in SCOPES:
        raise ValueError(f"scope: must be one of {', '.join(SCOPES)}, got {scope!r}")
    if not 1 <= ttl <= MAX_TTL_SECONDS:
        raise ValueError(f"ttl: must be between 1 and {MAX_TTL_SECONDS} seconds, got {ttl!r}")
    issued = time.time() if now is None else now
    claims = TokenClaims(
        agents=list(agents),
        scope=scope,
        exp=int(issued + ttl),
        sessions=None if sessions is None else list(sessions),
        blocks=True if blocks else None,
    )
    payload: dict[str, Any] = msgspec.to_builtins(claims)
    try:  # the same bounds the server applies when it reads the token
        msgspec.convert(payload, TokenClaims)
    except msgspec.ValidationError as exc:
        raise ValueError(f"token claims: {exc}") from None
    payload["iat"] = int(issued)
    return jwt.encode(payload, key.strip(), algorithm=ALGORITHM)


class Authenticator:
    """Decides what a presented token allows: the static ``tokens`` and, when ``secrets``
    are given, signed tokens. Not ``enabled`` (neither configured) means no authentication.

    Immutable: a rotation builds a new one and the server swaps it in.
    """

    def __init__(self, tokens: TokenSet | None = None, secrets: Sequence[bytes] = ()) -> None:
        self.tokens = tokens or TokenSet()
        self.secrets = tuple(secrets)
        for secret in self.secrets:
            if len(secret) < MIN_SECRET_BYTES:
                raise ValueError(f"token secret: must be at least {MIN_SECRET_BYTES} bytes")

    @property
    def enabled(self) -> bool:
        return bool(self.tokens) or bool(self.secrets)

    def authenticate(self, token: str | None, now: float) -> Grant:
        """The grant of ``token`` at time ``now``; ``TokenRejectedError`` otherwise."""
        if not token:
            raise TokenRejectedError(REASON_MISSING)
        grant = self.tokens.lookup(token)
        if grant is not None:
            return grant
        if not self.secrets or token.count(".") != 2:
            raise TokenRejectedError(REASON_UNKNOWN)
        claims = self._verify(token)
        # NaN and infinities pass the type check (PyJWT's JSON reads them); a token that
        # lives beyond the longest TTL was not minted for this server's rules.
        if not math.isfinite(claims.exp) or claims.exp > now + _MAX_EXP_AHEAD:
            raise TokenRejectedError(REASON_EXP_RANGE)
        if claims.nbf is not None and not math.isfinite(claims.nbf):
            raise TokenRejectedError(REASON_NBF_RANGE)
        if now >= claims.exp:
            raise TokenRejectedError(REASON_EXPIRED)
        if claims.nbf is not None and now < claims.nbf:
            raise TokenRejectedError(REASON_NOT_YET)
        return Grant(
            token,
            tuple(claims.agents),
            claims.scope,
            None if claims.sessions is None else frozenset(claims.sessions),
            float(claims.exp),
            signed=True,
            blocks=bool(claims.blocks),
        )

    def recheck(self, grant: Grant | None, agent_id: str | None, now: float) -> Grant | None:
        """The grant an open connection holds under this (new) configuration: ``None`` when
        authentication is off; ``TokenRejectedError`` (``token no longer valid: ...``) when
        its token is not valid any more or may no longer address ``agent_id``."""
        if not self.enabled:
            return None
        try:
            new = self.authenticate(grant.token if grant else None, now)
        except TokenRejectedError as exc:
            raise TokenRejectedError(f"token no longer valid: {exc.reason}") from None
        if agent_id is not None and not new.permits(agent_id):
            raise TokenRejectedError("token no longer valid: it may not address this agent")
        return new

    def _verify(self, token: str) -> TokenClaims:
        payload: Mapping[str, Any] | None = None
        for secret in self.secrets:
            try:
                # Times are checked against the server's clock below, not PyJWT's.
                payload = jwt.decode(
                    token,
                    secret,
                    algorithms=[ALGORITHM],
                    options={"verify_exp": False, "verify_nbf": False, "verify_iat": False},
                )
                break
            except jwt.InvalidSignatureError:
                continue  # maybe signed with the next (older) secret
            except jwt.InvalidAlgorithmError:
                raise TokenRejectedError(REASON_ALGORITHM) from None
            except jwt.DecodeError:
                raise TokenRejectedError(REASON_MALFORMED) from None
            except jwt.InvalidTokenError as exc:  # a registered claim (aud, sub, ...) is wrong
                raise TokenRejectedError(f"token claims invalid: {type(exc).__name__}") from None
        if payload is None:
            raise TokenRejectedError(REASON_SIGNATURE)
        try:
            return msgspec.convert(payload, TokenClaims)
        except msgspec.ValidationError as exc:
            raise TokenRejectedError(_claims_problem(exc)) from None


def _claims_problem(exc: msgspec.ValidationError) -> str:
    """``token claims invalid: <claim>: <what was expected>``, without the claim's value."""
    text = str(exc)
    where = re.search(r" - at `\$\.?([^`]*)`$", text)
    problem = text[: where.start()] if where else text
    if problem.startswith("Invalid enum value"):  # the only enum is the scope
        problem = f"must be one of {', '.join(SCOPES)}"
    return (
        f"token claims invalid: {where.group(1)}: {problem}"
        if where
        else (f"token claims invalid: {problem}")
    )


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
