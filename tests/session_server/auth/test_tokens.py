"""Token specs, scopes, signed tokens, matching and header extraction (pure)."""

from __future__ import annotations

import base64
import json
from typing import Any

import jwt
import pytest

from session_server.auth import (
    MAX_CLOCK_SKEW_SECONDS,
    MAX_TTL_SECONDS,
    SCOPES,
    Authenticator,
    Grant,
    TokenRejectedError,
    TokenSet,
    mint_token,
    parse_secrets,
    parse_token_file,
    parse_token_spec,
    parse_token_specs,
    scope_allows,
    token_from_headers,
)


def test_plain_token_permits_every_agent() -> None:
    grant = parse_token_spec("s3cret")
    assert grant == Grant("s3cret", ())
    assert grant.unrestricted
    assert grant.permits("anything at all")


def test_restricted_token_uses_fnmatch_patterns() -> None:
    grant = parse_token_spec("tok:team-a-*, bot?")
    assert grant.patterns == ("team-a-*", "bot?")
    assert grant.permits("team-a-1")
    assert grant.permits("bot7")
    assert not grant.permits("team-b-1")
    assert not grant.permits("TEAM-A-1")  # case-sensitive
    assert not grant.permits("bot77")


@pytest.mark.parametrize("spec", ["", ":a-*", "tok:", "tok:, ,", "to k", "a,b"])
def test_malformed_specs_are_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="token spec"):
        parse_token_spec(spec)


def test_repr_hides_the_secret() -> None:
    assert "s3cret" not in repr(parse_token_spec("s3cret:a*"))


def test_lookup_finds_the_grant_and_refuses_others() -> None:
    tokens = parse_token_specs(["one", "two:x-*"])
    assert bool(tokens) and len(tokens) == 2
    assert tokens.lookup("one") == Grant("one")
    assert tokens.lookup("two") == Grant("two", ("x-*",))
    assert tokens.lookup("three") is None
    assert tokens.lookup("") is None
    assert tokens.lookup(None) is None
    assert tokens.lookup("on") is None
    assert not TokenSet()


def test_env_value_forms() -> None:
    plain = TokenSet.from_env("a, b,c")
    assert [plain.lookup(t) is not None for t in ("a", "b", "c")] == [True, True, True]
    mixed = TokenSet.from_env("r:team-*,ops-1;p q")
    grant = mixed.lookup("r")
    assert grant is not None and grant.patterns == ("team-*", "ops-1")
    assert mixed.lookup("p") == Grant("p")
    assert mixed.lookup("q") == Grant("q")
    assert not TokenSet.from_env("")
    assert not TokenSet.from_env(None)


def test_token_from_headers() -> None:
    assert token_from_headers("Bearer abc") == "abc"
    assert token_from_headers("bearer   abc ") == "abc"
    assert token_from_headers("Basic abc") is None
    assert token_from_headers("Bearer ") is None
    assert token_from_headers(None, ["jsonrpc", "bearer.xyz"]) == "xyz"
    assert token_from_headers(None, ["bearer."]) is None
    assert token_from_headers("Bearer h", ["bearer.p"]) == "h"
    assert token_from_headers(None, []) is None


# ------------------------------------------------------------------ scopes and static specs


def test_static_tokens_are_admin_unless_the_spec_names_a_scope() -> None:
    assert parse_token_spec("tok").scope == "admin"
    assert parse_token_spec("tok:a-*,b").scope == "admin"
    read = parse_token_spec("tok:*:read")
    assert (read.patterns, read.scope) == (("*",), "read")
    assert parse_token_spec("tok:team-*, x : write").scope == "write"
    # A pattern that ends in ":read" keeps its meaning when a scope follows it.
    odd = parse_token_spec("tok:a:read:admin")
    assert (odd.patterns, odd.scope) == (("a:read",), "admin")
    assert parse_token_spec("tok:a:b").patterns == ("a:b",)
    with pytest.raises(ValueError, match="empty agent pattern list"):
        parse_token_spec("tok::read")


@pytest.mark.parametrize("scope", SCOPES)
def test_a_scope_name_as_the_only_pattern_is_refused_as_ambiguous(scope: str) -> None:
    # "tok:read" used to mean the agent pattern "read" with scope admin: fail-open.
    with pytest.raises(ValueError, match=f"ambiguous.*TOKEN:\\*:{scope}") as info:
        parse_token_spec(f"s3cret-tok:{scope}")
    assert "s3cret-tok" not in str(info.value)
    # The position of the spec is named, never its token.
    with pytest.raises(ValueError, match=r"^spec 3: token spec: TOKEN:") as info:
        parse_token_specs(["a", "", f"s3cret-tok:{scope}"])
    assert "s3cret-tok" not in str(info.value)
    with pytest.raises(ValueError, match="line 2: token spec: TOKEN:"):
        parse_token_file(f"ok\ns3cret-tok:{scope}\n")
    # The unambiguous spellings keep working.
    every = parse_token_spec(f"tok:*:{scope}")
    assert (every.patterns, every.scope) == (("*",), scope)
    named = parse_token_spec(f"tok:{scope}:admin")
    assert (named.patterns, named.scope) == ((scope,), "admin")
    assert parse_token_spec(f"tok:{scope},other").patterns == (scope, "other")


def test_scope_order() -> None:
    assert SCOPES == ("read", "write", "admin")
    allowed = {(g, n) for g in SCOPES for n in SCOPES if scope_allows(g, n)}
    assert allowed == {
        ("read", "read"),
        ("write", "read"),
        ("write", "write"),
        ("admin", "read"),
        ("admin", "write"),
        ("admin", "admin"),
    }


def test_token_file_and_secrets_parsing() -> None:
    text = "# comment\n\n tok-a \ntok-b:team-*:read\n"
    assert parse_token_file(text) == ["tok-a", "tok-b:team-*:read"]
    with pytest.raises(ValueError, match="line 2: token spec"):
        parse_token_file("ok\nbad token\n")
    assert parse_secrets(f"{'a' * 32}\n\n  {'b' * 40}  \n") == (b"a" * 32, b"b" * 40)
    with pytest.raises(ValueError, match="line 2: must be at least 32 bytes, got 5"):
        parse_secrets(f"{'a' * 32}\nshort\n")
    with pytest.raises(ValueError, match="empty"):
        parse_secrets("\n \n")


# ------------------------------------------------------------------ signed tokens

SECRET = "k" * 32 + "-first"
OLD = "o" * 32 + "-older"
NOW = 1_800_000_000.0


def test_mint_and_authenticate_round_trip() -> None:
    auth = Authenticator(secrets=[SECRET.encode()])
    assert auth.enabled and not Authenticator().enabled
    token = mint_token(
        SECRET, agents=["bot-*"], sessions=["s1", "s2"], scope="read", ttl=60, now=NOW
    )
    grant = auth.authenticate(token, NOW + 59)
    assert grant.signed and grant.scope == "read" and grant.expires_at == NOW + 60
    assert grant.permits("bot-1") and not grant.permits("other")
    assert grant.permits_session("s1") and not grant.permits_session("s3")
    assert not grant.permits_session(None)
    assert not grant.expired(NOW + 59.9) and grant.expired(NOW + 60)
    assert token not in repr(grant)
    unlimited = auth.authenticate(
        mint_token(SECRET, agents=["*"], scope="admin", ttl=5, now=NOW), NOW
    )
    assert unlimited.sessions is None and unlimited.permits_session(None)


def test_an_older_secret_still_verifies_during_a_rotation() -> None:
    token = mint_token(OLD, agents=["a"], scope="write", ttl=60, now=NOW)
    rotated = Authenticator(secrets=[SECRET.encode(), OLD.encode()])
    assert rotated.authenticate(token, NOW).scope == "write"
    with pytest.raises(TokenRejectedError, match="signature"):
        Authenticator(secrets=[SECRET.encode()]).authenticate(token, NOW)


def _forge(payload: dict[str, Any], key: str = SECRET, algorithm: str = "HS256") -> str:
    return jwt.encode(payload, key, algorithm=algorithm)


def _swap_payload(token: str, claims: dict[str, Any]) -> str:
    header, _payload, signature = token.split(".")
    body = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"{header}.{body}.{signature}"


GOOD = {"agents": ["a"], "scope": "read", "exp": NOW + 60}


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        (None, "a token is required"),
        ("", "a token is required"),
        ("not-configured", "unknown token"),
        (mint_token(SECRET, agents=["a"], scope="read", ttl=60, now=NOW - 120), "token expired"),
        (_swap_payload(_forge(GOOD), {**GOOD, "scope": "admin"}), "signature does not verify"),
        (_forge(GOOD, key="w" * 40), "signature does not verify"),
        (_forge(GOOD, algorithm="HS512", key="k" * 64), "not signed with HS256"),
        (jwt.encode(GOOD, None, algorithm="none"), "not signed with HS256"),
        ("a.b.c", "malformed token"),
        ("bm90.bm90.c2ln", "malformed token"),
        (jwt.api_jws.encode(b"not json", SECRET, algorithm="HS256"), "malformed token"),
        (jwt.api_jws.encode(b"[1, 2]", SECRET, algorithm="HS256"), "malformed token"),
        (_forge({**GOOD, "scope": "root"}), "claims invalid: scope: must be one of read"),
        (_forge({"agents": ["a"], "scope": "read"}), "missing required field `exp`"),
        (_forge({**GOOD, "agents": "a"}), "claims invalid: agents: Expected `array`"),
        (_forge({**GOOD, "agents": []}), "claims invalid: agents: Expected `array` of length"),
        (_forge({**GOOD, "sessions": [""]}), "claims invalid: sessions[0]"),
        (_forge({**GOOD, "nbf": NOW + 30}), "not valid yet"),
        (_forge({**GOOD, "aud": "someone"}), "claims invalid: InvalidAudienceError"),
        (_forge({**GOOD, "exp": 1e12}), "claims invalid: exp: must be a finite time"),
        (_forge({**GOOD, "exp": float("inf")}), "claims invalid: exp: must be a finite time"),
        (_forge({**GOOD, "exp": float("nan")}), "claims invalid: exp: must be a finite time"),
        (_forge({**GOOD, "exp": -float("inf")}), "claims invalid: exp: must be a finite time"),
        (_forge({**GOOD, "nbf": float("nan")}), "claims invalid: nbf: must be a finite time"),
    ],
)
def test_refusals_say_what_and_nothing_more(token: str | None, reason: str) -> None:
    auth = Authenticator(parse_token_specs(["static-one"]), [SECRET.encode()])
    with pytest.raises(TokenRejectedError) as info:
        auth.authenticate(token, NOW)
    assert reason in info.value.reason
    assert info.value.code == -32003
    assert SECRET not in info.value.reason and "root" not in info.value.reason
    if token:
        assert token not in info.value.reason


def test_exp_may_lie_at_most_the_longest_ttl_and_a_small_skew_ahead() -> None:
    auth = Authenticator(secrets=[SECRET.encode()])
    latest = NOW + MAX_TTL_SECONDS + MAX_CLOCK_SKEW_SECONDS
    assert auth.authenticate(_forge({**GOOD, "exp": latest}), NOW).expires_at == latest
    with pytest.raises(TokenRejectedError, match="exp: must be a finite time"):
        auth.authenticate(_forge({**GOOD, "exp": latest + 1}), NOW)
    # A token minted with the longest TTL is accepted.
    longest = mint_token(SECRET, agents=["a"], scope="read", ttl=MAX_TTL_SECONDS, now=NOW)
    assert auth.authenticate(longest, NOW).signed


def test_static_tokens_win_and_jwts_need_a_secret() -> None:
    token = mint_token(SECRET, agents=["a"], scope="read", ttl=60, now=NOW)
    with pytest.raises(TokenRejectedError, match="unknown token"):
        Authenticator(parse_token_specs(["x"])).authenticate(token, NOW)
    both = Authenticator(parse_token_specs(["x:*:write"]), [SECRET.encode()])
    assert both.authenticate("x", NOW).scope == "write"
    assert both.authenticate(token, NOW).signed


@pytest.mark.parametrize(
    ("kwargs", "problem"),
    [
        ({"secret": "short"}, "secret"),
        ({"scope": "root"}, "scope"),
        ({"ttl": 0}, "ttl"),
        ({"ttl": 400 * 86400}, "ttl"),
        ({"agents": "bot"}, "lists of strings"),
        ({"agents": []}, "agents"),
        ({"sessions": ["x" * 300]}, "sessions"),
    ],
)
def test_mint_refuses_bad_arguments(kwargs: dict[str, Any], problem: str) -> None:
    args: dict[str, Any] = {"secret": SECRET, "agents": ["a"], "scope": "read", "ttl": 60}
    with pytest.raises(ValueError, match=problem):
        mint_token(**{**args, **kwargs})


def test_recheck_after_a_rotation() -> None:
    before = Authenticator(parse_token_specs(["a", "b:bot-*:write"]), [SECRET.encode()])
    signed = before.authenticate(
        mint_token(SECRET, agents=["*"], scope="read", ttl=60, now=NOW), NOW
    )
    after = Authenticator(parse_token_specs(["b:bot-1:read"]), [OLD.encode()])
    with pytest.raises(TokenRejectedError, match="no longer valid: unknown token"):
        after.recheck(before.authenticate("a", NOW), "bot-1", NOW)
    with pytest.raises(TokenRejectedError, match="no longer valid: token signature"):
        after.recheck(signed, "bot-1", NOW)
    with pytest.raises(TokenRejectedError, match="no longer valid: it may not address"):
        after.recheck(before.authenticate("b", NOW), "bot-2", NOW)
    demoted = after.recheck(before.authenticate("b", NOW), "bot-1", NOW)
    assert demoted is not None and demoted.scope == "read"
    assert Authenticator().recheck(signed, "bot-1", NOW) is None  # authentication turned off
    with pytest.raises(TokenRejectedError, match="a token is required"):
        after.recheck(None, "bot-1", NOW)  # a connection opened while authentication was off
