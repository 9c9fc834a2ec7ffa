"""Token specs, matching and header extraction (pure)."""

from __future__ import annotations

import pytest

from session_server.auth import (
    Grant,
    TokenSet,
    parse_token_spec,
    parse_token_specs,
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
