"""Per-agent data keys: sealed entries open only with their key, for their agent."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from session_server.runtime.cluster_keys import (
    KeyRing,
    new_key,
    open_sealed,
    seal,
    sealed_key_id,
)


@given(st.binary(max_size=2000))
def test_a_sealed_entry_opens_with_its_key(payload: bytes) -> None:
    key = new_key(None)
    sealed = seal(key, "ss.agent.a", payload)
    assert len(payload) < 16 or payload not in sealed
    assert sealed_key_id(sealed) == key.key_id
    assert open_sealed(key, "ss.agent.a", sealed) == payload


def test_another_key_another_agent_or_an_altered_byte_is_refused() -> None:
    key = new_key(None)
    sealed = seal(key, "ss.agent.a", b"secret text")
    with pytest.raises(ValueError):
        open_sealed(new_key(key), "ss.agent.a", sealed)
    with pytest.raises(ValueError):
        open_sealed(key, "ss.agent.b", sealed)  # moved to another agent's subject
    altered = sealed[:-1] + bytes([sealed[-1] ^ 1])
    with pytest.raises(ValueError):
        open_sealed(key, "ss.agent.a", altered)


def test_plain_entries_pass_and_rings_find_keys_by_id() -> None:
    first = new_key(None)
    second = new_key(first)
    ring = KeyRing([first, second])
    assert ring.current == second and second.key_id == first.key_id + 1
    assert ring.get(first.key_id) == first and ring.get(99) is None
    assert sealed_key_id(b"Mplain") is None
    assert open_sealed(first, "s", b"Mplain") == b"Mplain"
