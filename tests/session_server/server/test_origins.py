"""The Origin rule (``origins``), pure: normalization, the server's own origin, the
operator's allowed origins and ``*``."""

from __future__ import annotations

import pytest

from session_server.server.origins import OriginPolicy, normalize_origin, parse_allowed_origin


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("http://Example.COM", "http://example.com:80"),
        ("https://example.com", "https://example.com:443"),
        ("http://127.0.0.1:8765", "http://127.0.0.1:8765"),
        ("http://127.0.0.1:8765/", "http://127.0.0.1:8765"),
        ("http://[::1]:9000", "http://[::1]:9000"),
        ("null", "null"),
        ("NULL", "null"),
    ],
)
def test_origins_are_normalized(text: str, expected: str) -> None:
    assert normalize_origin(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "example.com",
        "ftp://example.com",
        "http://example.com/path",
        "http://example.com?q=1",
        "http://user@example.com",
        "http://example.com:99999",
        "http://",
        "",
    ],
)
def test_what_is_not_an_origin(text: str) -> None:
    assert normalize_origin(text) is None
    with pytest.raises(ValueError, match=r"allow-origin: .* is not an origin"):
        parse_allowed_origin(text)


def test_requests_without_origin_pass() -> None:
    assert OriginPolicy().refusal(None, "127.0.0.1:8765") is None
    assert OriginPolicy().refusal(None, None) is None


def test_the_servers_own_origin_passes() -> None:
    policy = OriginPolicy()
    assert policy.refusal("http://127.0.0.1:8765", "127.0.0.1:8765") is None
    assert policy.refusal("http://LOCALHOST:8765", "localhost:8765") is None
    assert policy.refusal("http://example.com", "example.com") is None  # port 80 both
    assert policy.refusal("http://[::1]:8765", "[::1]:8765") is None


def test_another_scheme_host_or_port_is_refused() -> None:
    policy = OriginPolicy()
    for origin in (
        "http://127.0.0.1:8766",
        "http://localhost:8765",
        "https://127.0.0.1:8765",
        "http://evil.example",
        "null",
        "garbage",
    ):
        refusal = policy.refusal(origin, "127.0.0.1:8765")
        assert refusal is not None and "--allow-origin" in refusal, origin
    assert policy.refusal("http://127.0.0.1:8765", None) is not None  # no Host to match


def test_allowed_origins_and_any() -> None:
    policy = OriginPolicy.of(["http://app.example:3000", "null"])
    assert policy.refusal("http://APP.example:3000", "127.0.0.1:8765") is None
    assert policy.refusal("null", "127.0.0.1:8765") is None
    assert policy.refusal("http://app.example:3001", "127.0.0.1:8765") is not None
    anyone = OriginPolicy.of(["*"])
    assert anyone.any and anyone.refusal("http://evil.example", "127.0.0.1:8765") is None


def test_a_bad_allowed_origin_names_itself() -> None:
    with pytest.raises(ValueError, match="'http://x/y'"):
        OriginPolicy.of(["http://ok.example", "http://x/y"])
